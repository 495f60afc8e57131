//! How client commands print: `--output json` prints the server's JSON (pretty, one document;
//! event streams one document per line), tables are borderless comfy-table columns.

use std::sync::atomic::{AtomicBool, Ordering};

use comfy_table::{presets, ContentArrangement, Table};
use serde_json::Value;

use super::exit::Exit;
use crate::args::OutputFormat;

/// Where and how a command prints its results.
#[derive(Debug, Clone, Copy)]
pub struct Out {
    /// Table or JSON.
    pub format: OutputFormat,
    /// Whether colour may be used (not with `--no-color` or `NO_COLOR`).
    pub color: bool,
}

impl Out {
    /// Whether JSON was asked for.
    pub fn json(&self) -> bool {
        self.format == OutputFormat::Json
    }
}

/// Set once standard output's reader went away (a closed pipe, as with `| head`).
static READER_GONE: AtomicBool = AtomicBool::new(false);

/// Whether standard output's reader went away: output is dropped from then on.
pub fn reader_gone() -> bool {
    READER_GONE.load(Ordering::Relaxed)
}

/// Writes one line on standard output. When the reader went away (a broken pipe), this and
/// every later line is dropped quietly and the command goes on to its own exit code (a
/// `runs wait` or `runs watch` still exits by the run's final status); any other write
/// error (a full disk, an I/O error) ends the process with exit 3 and the error on
/// standard error.
pub fn write_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    if reader_gone() {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => READER_GONE.store(true, Ordering::Relaxed),
        Err(error) => {
            eprintln!("trellis: cannot write standard output: {error}");
            std::process::exit(i32::from(Exit::Error as u8));
        }
    }
}

/// `println!` through [`write_line`].
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::client::output::write_line(format_args!($($arg)*))
    };
}
pub(crate) use say;

/// Prints `value` as pretty JSON.
pub fn print_json(value: &Value) {
    say!("{}", serde_json::to_string_pretty(value).unwrap_or_default());
}

/// Prints `value` as one line of JSON.
pub fn print_json_line(value: &Value) {
    say!("{}", serde_json::to_string(value).unwrap_or_default());
}

/// Prints a table with `headers` over `rows`.
pub fn print_table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut table = Table::new();
    table.load_preset(presets::NOTHING).set_content_arrangement(ContentArrangement::Disabled).set_header(headers);
    for row in rows {
        table.add_row(row);
    }
    say!("{}", trim_lines(&table.to_string()));
}

/// Prints `field  value` pairs, the fields aligned.
pub fn print_fields(fields: Vec<(&str, String)>) {
    let mut table = Table::new();
    table.load_preset(presets::NOTHING).set_content_arrangement(ContentArrangement::Disabled);
    for (field, value) in fields {
        table.add_row(vec![field.to_owned(), value]);
    }
    say!("{}", trim_lines(&table.to_string()));
}

fn trim_lines(text: &str) -> String {
    text.lines().map(|line| line.strip_prefix(' ').unwrap_or(line).trim_end()).collect::<Vec<_>>().join("\n")
}

/// A string field of `value`, or `-`.
pub fn text(value: &Value, field: &str) -> String {
    match value.get(field) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => "-".to_owned(),
        Some(other) => other.to_string(),
    }
}

/// The `HH:MM:SS.mmm` of an RFC 3339 timestamp (the whole text when it is not one).
pub fn clock(timestamp: &str) -> String {
    timestamp.get(11..23).filter(|_| timestamp.len() >= 23).unwrap_or(timestamp).to_owned()
}
