//! The newcomer guides are tested, so they cannot rot:
//!
//! - `docs/getting-started.md`: its ```` ```sh test ```` blocks run in order in one `bash`
//!   (`set -euo pipefail`, repository root as working directory, the built `trellis` first on
//!   `PATH`, a fresh `TRELLIS_DATA_DIR`, a free port in `TRELLIS_BIND` / `TRELLIS_URL`), bounded
//!   by a guard; a background `trellis serve` is killed at the end by a `trap`;
//! - `docs/aws.md`: its offline ```` ```sh test ```` blocks the same way (a block tagged
//!   `sh test sam` needs the SAM CLI that `scripts/test.sh` installs into `.cache/sam`: it is
//!   skipped when that is missing, unless `TRELLIS_REQUIRE_EMULATORS` is set);
//! - `docs/aws-local.md`: its ```` ```sh aws-local ```` blocks, inside the emulators' network
//!   namespace (ignored unless the emulators are set up);
//! - every ```` ```json workflow ```` block of `docs/authoring.md` and
//!   `docs/getting-started.md` registers (`POST /v1/workflows` answers 2xx) on an in-process
//!   embedded host;
//! - every `trellis …` command shown in a ```` ```sh ```` block of `README.md` and `docs/**/*.md`,
//!   tested or not, is accepted by the real binary's argument parser;
//! - every relative link between `docs/**/*.md` and `README.md` names a file that exists (and a
//!   heading, for a `#fragment`).

mod common;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// How long one guide's script may run before the guard stops it (and its background jobs).
const SCRIPT_GUARD_SECONDS: u64 = 240;

/// Fenced code blocks of a markdown document, selected by their info string.
mod markdown {
    /// One fenced block.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) struct Block {
        /// The words of the info string after the selecting ones (`sh test sam` selected by
        /// `["sh", "test"]` gives `["sam"]`).
        pub(crate) extra: Vec<String>,
        /// The block's text, every line ending in `\n`.
        pub(crate) code: String,
        /// The 1-based line of the opening fence.
        pub(crate) line: usize,
    }

    /// Every fenced block (```` ``` ```` or `~~~`, three or more, indented at most three
    /// spaces) whose info string starts with the words `tag` (e.g. `["sh", "test"]`), in
    /// document order. A block left open runs to the end of the document, as CommonMark says.
    pub(crate) fn fenced_blocks(markdown: &str, tag: &[&str]) -> Vec<Block> {
        /// The block being read: its fence, where it opened, its info words and lines so far.
        struct Open<'a> {
            marker: char,
            length: usize,
            line: usize,
            words: Vec<String>,
            lines: Vec<&'a str>,
        }
        let mut blocks = Vec::new();
        let mut open: Option<Open<'_>> = None;
        for (index, line) in markdown.lines().enumerate() {
            let indent = line.len() - line.trim_start_matches(' ').len();
            let fence = (indent <= 3).then(|| fence_of(&line[indent..])).flatten();
            match (open.as_mut(), fence) {
                (None, Some((marker, length, info))) => {
                    let words = info.split_whitespace().map(str::to_owned).collect();
                    open = Some(Open { marker, length, line: index + 1, words, lines: Vec::new() });
                }
                (Some(block), Some((marker, length, info)))
                    if marker == block.marker && length >= block.length && info.is_empty() =>
                {
                    let block = open.take().expect("a block is open");
                    push(&mut blocks, tag, block.line, block.words, &block.lines);
                }
                (Some(block), _) => block.lines.push(line),
                (None, None) => {}
            }
        }
        if let Some(block) = open {
            push(&mut blocks, tag, block.line, block.words, &block.lines);
        }
        blocks
    }

    fn push(blocks: &mut Vec<Block>, tag: &[&str], line: usize, words: Vec<String>, lines: &[&str]) {
        let selected = words.len() >= tag.len() && words.iter().zip(tag).all(|(word, wanted)| word == wanted);
        if selected {
            let code = lines.iter().map(|line| format!("{line}\n")).collect();
            blocks.push(Block { extra: words[tag.len()..].to_vec(), code, line });
        }
    }

    /// A fence line: its marker, the marker's length and the info string (trimmed).
    fn fence_of(text: &str) -> Option<(char, usize, &str)> {
        let marker = text.chars().next().filter(|c| *c == '`' || *c == '~')?;
        let length = text.len() - text.trim_start_matches(marker).len();
        let info = text[length..].trim();
        // A backtick fence's info string may not contain a backtick (that is inline code).
        (length >= 3 && !(marker == '`' && info.contains('`'))).then_some((marker, length, info))
    }

    /// The targets of the inline links and images (`[text](target)`, `![alt](target "title")`)
    /// outside fenced blocks and code spans, with their 1-based line.
    pub(crate) fn links(markdown: &str) -> Vec<(usize, String)> {
        let mut found = Vec::new();
        let mut fence: Option<(char, usize)> = None;
        for (index, line) in markdown.lines().enumerate() {
            let indent = line.len() - line.trim_start_matches(' ').len();
            let this_fence = (indent <= 3).then(|| fence_of(&line[indent..])).flatten();
            match (fence, this_fence) {
                (None, Some((marker, length, _))) => {
                    fence = Some((marker, length));
                    continue;
                }
                (Some((marker, length)), Some((m, l, info))) if m == marker && l >= length && info.is_empty() => {
                    fence = None;
                    continue;
                }
                (Some(_), _) => continue,
                (None, None) => {}
            }
            let text = without_code_spans(line);
            let mut rest = text.as_str();
            while let Some(at) = rest.find("](") {
                let after = &rest[at + 2..];
                let Some(end) = after.find(')') else { break };
                let target = after[..end].split_whitespace().next().unwrap_or("");
                let target = target.trim_start_matches('<').trim_end_matches('>');
                if !target.is_empty() {
                    found.push((index + 1, target.to_owned()));
                }
                rest = &after[end..];
            }
        }
        found
    }

    /// The anchors GitHub gives the headings (`#`…`######` lines outside fenced blocks): the
    /// text lower-cased, code-span backticks and punctuation other than `-` and `_` dropped,
    /// spaces as `-`; a repeated anchor gets `-1`, `-2`, ….
    pub(crate) fn anchors(markdown: &str) -> Vec<String> {
        let mut seen = std::collections::BTreeMap::<String, usize>::new();
        let mut anchors = Vec::new();
        let mut fence: Option<(char, usize)> = None;
        for line in markdown.lines() {
            let indent = line.len() - line.trim_start_matches(' ').len();
            let this_fence = (indent <= 3).then(|| fence_of(&line[indent..])).flatten();
            match (fence, this_fence) {
                (None, Some((marker, length, _))) => fence = Some((marker, length)),
                (Some((marker, length)), Some((m, l, info))) if m == marker && l >= length && info.is_empty() => {
                    fence = None
                }
                (Some(_), _) => {}
                (None, None) => {
                    let hashes = line.len() - line.trim_start_matches('#').len();
                    let Some(text) = line[hashes..].strip_prefix(' ').filter(|_| (1..=6).contains(&hashes)) else {
                        continue;
                    };
                    let slug: String = text
                        .trim()
                        .to_lowercase()
                        .chars()
                        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                        .map(|c| if c == ' ' { '-' } else { c })
                        .collect();
                    let count = seen.entry(slug.clone()).or_insert(0);
                    anchors.push(if *count == 0 { slug.clone() } else { format!("{slug}-{count}") });
                    *count += 1;
                }
            }
        }
        anchors
    }

    /// `line` with every code span (`` `…` ``) blanked out.
    fn without_code_spans(line: &str) -> String {
        let mut out = String::with_capacity(line.len());
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                out.push(' ');
            } else {
                out.push(if in_code { ' ' } else { c });
            }
        }
        out
    }
}

use markdown::{anchors, fenced_blocks, links};

/// The `trellis` command lines of a shell snippet, split into words as the shell would.
mod shell {
    /// Every `trellis …` command of `code`: at the start of a line, after `$(`, a pipe, `&&`,
    /// `||`, `;`, or environment assignments (`TRELLIS_URL=… trellis …`). Continued lines
    /// (`\` at the end) are joined first. A command ends at `)`, `|`, `&`, `;`, `>`, `<` or a
    /// `#` comment outside quotes. Words holding a shell expansion (`"$RUN"`) become `x`.
    pub(crate) fn trellis_commands(code: &str) -> Vec<Vec<String>> {
        let joined = code.replace("\\\n", " ");
        let mut commands = Vec::new();
        for line in joined.lines() {
            let mut starts_command = true;
            let mut current: Option<Vec<String>> = None;
            for (word, operator) in split(line) {
                if let Some(operator) = operator {
                    if let Some(done) = current.take() {
                        commands.push(done);
                    }
                    // `>` and `<` take a file name next; anything else starts a new command.
                    starts_command = !matches!(operator, '>' | '<');
                    if operator == '#' {
                        break;
                    }
                    continue;
                }
                let word = if word.contains('$') { "x".to_owned() } else { word };
                match current.as_mut() {
                    Some(command) => command.push(word),
                    None if starts_command && word == "trellis" => current = Some(Vec::new()),
                    None if starts_command && is_assignment(&word) => {}
                    None => starts_command = false,
                }
            }
            if let Some(done) = current {
                commands.push(done);
            }
        }
        commands
    }

    fn is_assignment(word: &str) -> bool {
        word.split_once('=')
            .is_some_and(|(name, _)| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    }

    /// Shell words and operators: `(word, None)` or `(_, Some(operator))`, where `$(` counts
    /// as the operator `(`.
    fn split(line: &str) -> Vec<(String, Option<char>)> {
        let mut out = Vec::new();
        let mut word = String::new();
        let mut in_word = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\'' => {
                    in_word = true;
                    word.extend(chars.by_ref().take_while(|&c| c != '\''));
                }
                '"' => {
                    in_word = true;
                    while let Some(c) = chars.next() {
                        match c {
                            '"' => break,
                            '\\' => word.extend(chars.next()),
                            other => word.push(other),
                        }
                    }
                }
                '\\' => {
                    in_word = true;
                    word.extend(chars.next());
                }
                '$' if chars.peek() == Some(&'(') => {
                    chars.next();
                    flush(&mut out, &mut word, &mut in_word);
                    out.push((String::new(), Some('(')));
                }
                '#' if !in_word => {
                    out.push((String::new(), Some('#')));
                    break;
                }
                ' ' | '\t' => flush(&mut out, &mut word, &mut in_word),
                '(' | ')' | '|' | '&' | ';' | '>' | '<' => {
                    flush(&mut out, &mut word, &mut in_word);
                    out.push((String::new(), Some(c)));
                }
                other => {
                    in_word = true;
                    word.push(other);
                }
            }
        }
        flush(&mut out, &mut word, &mut in_word);
        out
    }

    fn flush(out: &mut Vec<(String, Option<char>)>, word: &mut String, in_word: &mut bool) {
        if *in_word {
            out.push((std::mem::take(word), None));
            *in_word = false;
        }
    }
}

use shell::trellis_commands;

#[test]
fn trellis_commands_are_found_in_shell_snippets() {
    let code = "trellis ping --wait 10\n\
                RUN=$(trellis runs start order-review --input amount=5 -o json | jq -r .runId)\n\
                printf %s \"$KEY\" | trellis hash-key\n\
                TRELLIS_URL=http://h/v trellis runs watch \"$RUN\"   # a comment\n\
                trellis runs wait \"$RUN\" || test $? -eq 2\n\
                trellis interrupts answer \"$RUN\" ask --value '{\"answers\": {\"a\": 1}}'\n\
                trellis workflows register a.json \\\n  b.json\n\
                echo trellis is not a command here; trellis completions bash > out\n\
                cargo run -p trellis -- serve\n";
    let words = |line: &str| line.split(' ').map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        trellis_commands(code),
        vec![
            words("ping --wait 10"),
            words("runs start order-review --input amount=5 -o json"),
            words("hash-key"),
            words("runs watch x"),
            words("runs wait x"),
            vec![
                "interrupts".into(),
                "answer".into(),
                "x".into(),
                "ask".into(),
                "--value".into(),
                "{\"answers\": {\"a\": 1}}".into()
            ],
            words("workflows register a.json b.json"),
            words("completions bash"),
        ]
    );
}

#[test]
fn fenced_blocks_are_selected_by_the_words_of_their_info_string() {
    let doc = "# Title\n\n```sh test\necho one\n```\n\n```sh\necho shown only\n```\n\n\
               ```text\n```sh test\nnot a fence inside text\n```\n\n~~~sh test sam\necho two\n  ~~~\n\n\
               ````sh test\n```\nnested fence\n````\n";
    let blocks = fenced_blocks(doc, &["sh", "test"]);
    assert_eq!(blocks.len(), 3, "{blocks:?}");
    assert_eq!((blocks[0].code.as_str(), blocks[0].line, blocks[0].extra.is_empty()), ("echo one\n", 3, true));
    assert_eq!((blocks[1].code.as_str(), blocks[1].extra.clone()), ("echo two\n", vec!["sam".to_owned()]));
    assert_eq!(blocks[2].code, "```\nnested fence\n");
    assert_eq!(fenced_blocks(doc, &["sh"]).len(), 4);
    assert_eq!(fenced_blocks(doc, &["text"])[0].code, "```sh test\nnot a fence inside text\n");
    assert!(fenced_blocks(doc, &["json", "workflow"]).is_empty());
    assert_eq!(
        fenced_blocks("```json workflow\n{}\n", &["json", "workflow"])[0].code,
        "{}\n",
        "an open block runs to the end"
    );
}

#[test]
fn links_outside_code_are_found_with_their_lines() {
    let doc = "See [the guide](docs/a.md#part) and ![img](b.png \"t\").\n`[not](code.md)`\n\
               ```md\n[inside](fence.md)\n```\n[web](https://example.org) [top](#anchor)\n";
    let found = links(doc);
    assert_eq!(
        found,
        vec![
            (1, "docs/a.md#part".to_owned()),
            (1, "b.png".to_owned()),
            (6, "https://example.org".to_owned()),
            (6, "#anchor".to_owned())
        ]
    );
}

#[test]
fn headings_get_github_anchors() {
    let doc = "# Getting started\n## `core.noop`, `core.delay`\n```sh\n# not a heading\n```\n\
               ## Budgets (`configurable.budget`)\n## Notes\n## Notes\n#hashtag\n";
    assert_eq!(
        anchors(doc),
        ["getting-started", "corenoop-coredelay", "budgets-configurablebudget", "notes", "notes-1"]
    );
}

/// The repository root (the `cli` package's parent).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("cli/ has a parent").to_path_buf()
}

fn read_doc(relative: &str) -> String {
    let path = repo_root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// The script of a guide: the selected blocks in order, each preceded by a comment naming
/// its line, after `set -euo pipefail` and a trap that stops the script's background jobs.
fn script_of(doc: &str, blocks: &[markdown::Block]) -> String {
    let mut script = String::from(
        "set -euo pipefail\n\
         # Stop what the guide started in the background (a `trellis serve &`), whatever the outcome.\n\
         trap 'status=$?; for pid in $(jobs -p); do kill \"$pid\" 2>/dev/null || true; done; wait; exit $status' EXIT\n",
    );
    for block in blocks {
        script.push_str(&format!("\n# ---- {doc}:{}\n", block.line));
        script.push_str(&block.code);
    }
    script
}

/// Where the hosts a guide starts listen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listen {
    /// `TRELLIS_BIND` / `TRELLIS_URL` on a free loopback port, so parallel tests never collide.
    FreePort,
    /// The guide's own addresses (the defaults, `127.0.0.1:8080`): only inside a private
    /// network namespace, where nothing else listens there.
    Defaults,
}

/// Runs `script` with bash from the repository root with the harness's environment: no
/// inherited `TRELLIS_*` / `OPENWOP_*` setting, the built `trellis` first on `PATH`, a fresh
/// data directory and configuration home, and with [`Listen::FreePort`] `TRELLIS_BIND` /
/// `TRELLIS_URL` on a free port. Panics, showing the script and everything it printed,
/// unless it exits 0 within the guard.
fn run_guide_script(doc: &str, script: &str, listen: Listen) {
    let scratch = tempfile::tempdir().expect("temp dir");
    let data_dir = scratch.path().join("trellis-data");
    let config_home = scratch.path().join("config");
    std::fs::create_dir_all(&config_home).expect("config home");
    let script_path = scratch.path().join("guide.sh");
    std::fs::write(&script_path, script).expect("script written");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_trellis")).parent().expect("bin dir").to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin_dir).chain(std::env::var_os("PATH").iter().flat_map(std::env::split_paths)),
    )
    .expect("PATH");

    let mut command = Command::new("timeout");
    // `timeout` runs bash in a process group of its own and signals the whole group when the
    // guard passes, so a background `trellis serve` cannot outlive the test.
    command.args(["--kill-after=10", &SCRIPT_GUARD_SECONDS.to_string(), "bash"]).arg(&script_path);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().into_owned();
        if name.starts_with("TRELLIS_") || name.starts_with("OPENWOP_") {
            command.env_remove(name);
        }
    }
    command
        .current_dir(repo_root())
        .env("PATH", path)
        .env("TRELLIS_DATA_DIR", &data_dir)
        .env("XDG_CONFIG_HOME", &config_home)
        .env("NO_COLOR", "1")
        .env("SAM_CLI_TELEMETRY", "0")
        .stdin(Stdio::null());
    if listen == Listen::FreePort {
        let port = free_port();
        command.env("TRELLIS_BIND", format!("127.0.0.1:{port}")).env("TRELLIS_URL", format!("http://127.0.0.1:{port}"));
    }
    let output = command.output().expect("bash runs");
    let printed = format!(
        "---- script\n{script}\n---- stdout\n{}\n---- stderr\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    match output.status.code() {
        Some(0) => {
            // Captured by the test harness: shown with `--nocapture`.
            println!("{printed}");
            let _ = writeln!(std::io::stderr(), "{doc}: every tested block ran");
        }
        Some(124 | 137) => panic!("{doc}: the script did not finish within {SCRIPT_GUARD_SECONDS} s\n{printed}"),
        status => panic!("{doc}: the script failed (exit {status:?})\n{printed}"),
    }
}

#[test]
fn getting_started_runs_as_written() {
    let doc = "docs/getting-started.md";
    let blocks = fenced_blocks(&read_doc(doc), &["sh", "test"]);
    assert!(blocks.len() >= 5, "{doc} has too few ```sh test blocks: {}", blocks.len());
    run_guide_script(doc, &script_of(doc, &blocks), Listen::FreePort);
}

#[test]
fn aws_guide_offline_steps_run_as_written() {
    let doc = "docs/aws.md";
    let mut blocks = fenced_blocks(&read_doc(doc), &["sh", "test"]);
    assert!(!blocks.is_empty(), "{doc} has no ```sh test block");
    let sam_installed = repo_root().join(".cache/sam/bin/sam").exists();
    if !sam_installed && std::env::var_os("TRELLIS_REQUIRE_EMULATORS").is_none() {
        let before = blocks.len();
        blocks.retain(|block| !block.extra.iter().any(|word| word == "sam"));
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {} block(s) of {doc} tagged `sam`: .cache/sam is missing (bash scripts/test.sh installs it)",
            before - blocks.len()
        );
    }
    run_guide_script(doc, &script_of(doc, &blocks), Listen::FreePort);
}

/// Runs `docs/aws-local.md`'s ```` ```sh aws-local ```` blocks: `trellis-aws-local` (built by
/// `cargo build -p trellis-aws-local` next to `trellis`) against the emulators whose endpoints
/// `scripts/emulators.sh run` exported.
#[test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
fn aws_local_guide_runs_against_the_emulators() {
    use trellis_testkit::external::{require_emulators, Service};
    require_emulators(&[Service::DynamoDb, Service::Sqs]);
    let doc = "docs/aws-local.md";
    let local = Path::new(env!("CARGO_BIN_EXE_trellis")).with_file_name("trellis-aws-local");
    assert!(local.exists(), "{} is missing: cargo build -p trellis-aws-local", local.display());
    let blocks = fenced_blocks(&read_doc(doc), &["sh", "aws-local"]);
    assert!(!blocks.is_empty(), "{doc} has no ```sh aws-local block");
    // The emulators' endpoints pass through (only TRELLIS_*/OPENWOP_* are cleared); inside the
    // emulators' private network namespace the guide's default address 127.0.0.1:8080 is free.
    run_guide_script(doc, &script_of(doc, &blocks), Listen::Defaults);
}

/// Every ```` ```json workflow ```` block of the guides, with where it is.
fn workflow_blocks() -> Vec<(String, Value)> {
    let mut found = Vec::new();
    for doc in ["docs/authoring.md", "docs/getting-started.md"] {
        for block in fenced_blocks(&read_doc(doc), &["json", "workflow"]) {
            let at = format!("{doc}:{}", block.line);
            let definition: Value =
                serde_json::from_str(&block.code).unwrap_or_else(|error| panic!("{at}: not JSON: {error}"));
            found.push((at, definition));
        }
    }
    found
}

#[tokio::test]
async fn every_workflow_of_the_guides_registers() {
    let blocks = workflow_blocks();
    assert!(blocks.len() >= 10, "too few ```json workflow blocks: {}", blocks.len());
    let mut ids = std::collections::BTreeMap::new();
    for (at, definition) in &blocks {
        let id = definition["id"].as_str().unwrap_or_else(|| panic!("{at}: no string id")).to_owned();
        if let Some(first) = ids.insert(id.clone(), at.clone()) {
            panic!("{at}: workflow id `{id}` is already used at {first}");
        }
    }

    // The model nodes of the guide name the provider `openai`; registration only checks the
    // route, nothing is ever called.
    let mut args = common::serve_args(None);
    args.ai.openai_base_url = Some("http://127.0.0.1:9/v1".to_owned());
    args.ai.openai_models = vec!["gpt-4o-mini".to_owned()];
    let host = common::start(args).await;
    let client = common::Client::new(format!("http://{}", host.addr), common::KEY);
    for (at, definition) in blocks {
        let (status, body) = client.request("POST", "/v1/workflows", Some(definition)).await;
        assert!((200..300).contains(&status), "{at}: POST /v1/workflows answered {status}: {body}");
    }
    host.stop().await;
}

/// README.md and every `*.md` of `docs/` and its folders (`docs/patterns/`), sorted.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let mut folders = vec![root.join("docs")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("a docs folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                files.push(path);
            }
        }
    }
    files[1..].sort();
    files
}

/// Every `trellis` command shown in a shell block of README.md and docs/**/*.md parses: the
/// real binary accepts its subcommand and flags (`--help` appended, so nothing runs).
#[test]
fn every_trellis_command_of_the_docs_parses() {
    let root = repo_root();
    let files = markdown_files(&root);
    let mut checked = 0;
    let mut refused = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable");
        for block in fenced_blocks(&text, &["sh"]) {
            for args in trellis_commands(&block.code) {
                let mut command = Command::new(env!("CARGO_BIN_EXE_trellis"));
                for (name, _) in std::env::vars_os() {
                    if name.to_string_lossy().starts_with("TRELLIS_") {
                        command.env_remove(name);
                    }
                }
                let output = command.args(&args).arg("--help").stdin(Stdio::null()).output().expect("trellis runs");
                checked += 1;
                if !output.status.success() {
                    refused.push(format!(
                        "{}:{}: trellis {}\n{}",
                        file.strip_prefix(&root).unwrap_or(file).display(),
                        block.line,
                        args.join(" "),
                        String::from_utf8_lossy(&output.stderr)
                    ));
                }
            }
        }
    }
    assert!(refused.is_empty(), "commands the CLI refuses:\n{}", refused.join("\n"));
    assert!(checked >= 30, "found only {checked} trellis commands in the docs");
}

/// Every relative link of README.md and docs/**/*.md names a file that exists, and a `#fragment`
/// into a markdown file (or the same file) names one of its headings.
#[test]
fn relative_links_between_the_docs_resolve() {
    let root = repo_root();
    let files = markdown_files(&root);
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable");
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            if let Some(fragment) = target.strip_prefix('#') {
                if !anchors(&text).iter().any(|anchor| anchor == fragment) {
                    broken.push(format!(
                        "{}:{line}: {target} (no such heading)",
                        file.strip_prefix(&root).unwrap_or(file).display()
                    ));
                }
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = file.parent().expect("a folder").join(path);
            let shown = || format!("{}:{line}: {target}", file.strip_prefix(&root).unwrap_or(file).display());
            if !resolved.exists() {
                broken.push(shown());
            } else if !fragment.is_empty() && resolved.extension().is_some_and(|ext| ext == "md") {
                let text = std::fs::read_to_string(&resolved).expect("readable");
                if !anchors(&text).iter().any(|anchor| anchor == fragment) {
                    broken.push(format!("{} (no such heading)", shown()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "links to files or headings that do not exist:\n{}", broken.join("\n"));
    assert!(files.len() > 10, "found only {} markdown files", files.len());
}
