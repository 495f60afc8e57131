//! A headless Chromium driven over WebDriver for the run viewer's tests (tests/e2e_ui.rs):
//! `chromedriver --port=P` on a free loopback port as a child process, one session with a
//! fresh profile directory, both ended when the [`Browser`] is dropped. Nothing here
//! downloads a browser: Debian's `chromium` and `chromium-driver` are installed by
//! scripts/test.sh. Screenshots go to `target/test-artifacts/ui/NAME.png`.
//!
//! The suites are `#[ignore]`d (like the emulator suites, trellis_testkit::external); run
//! with `--include-ignored` they call [`require_browser`], which fails naming what to install.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// The browser binary (Debian's `chromium`).
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Its WebDriver server (Debian's `chromium-driver`).
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The reason the browser suites give for being ignored.
pub const NEEDS_BROWSER: &str = "needs Chromium and chromedriver: run `bash scripts/test.sh`";
/// How long any wait on the page may take at most.
pub const WAIT: Duration = Duration::from_secs(20);

/// Which of the browser binaries are missing (empty when both are installed).
pub fn missing_browser() -> Vec<&'static str> {
    [CHROMIUM, CHROMEDRIVER].into_iter().filter(|path| !Path::new(path).exists()).collect()
}

/// Fails the calling test unless Chromium and chromedriver are installed.
///
/// # Panics
/// When one is missing: the suite was asked to run (it is `#[ignore]`d otherwise).
pub fn require_browser() {
    let missing = missing_browser();
    assert!(
        missing.is_empty(),
        "this suite needs a headless Chromium but {} {} missing; install Debian's packages: \
         `apt-get install -y chromium chromium-driver` (scripts/test.sh does){}",
        missing.join(" and "),
        if missing.len() == 1 { "is" } else { "are" },
        if std::env::var_os("TRELLIS_REQUIRE_EMULATORS").is_some() {
            " (TRELLIS_REQUIRE_EMULATORS is set: the browser was expected)"
        } else {
            ""
        },
    );
}

/// A free loopback port (bound, read, released).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// The target directory: `CARGO_TARGET_DIR`, else the one holding this test binary
/// (`target/debug/deps/NAME-HASH`).
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|dir| !dir.is_empty()) {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors().nth(3).expect("target/PROFILE/deps/BINARY").to_path_buf()
}

/// A chromedriver and one Chromium session on it.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    port: u16,
    session: Option<String>,
    closed: bool,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on a free port, waits for its `/status`, and opens a headless
    /// session with a fresh profile.
    pub async fn start() -> Self {
        require_browser();
        let port = free_port();
        let mut driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let started = Instant::now();
        loop {
            let status = http.get(format!("{url}/status")).send().await;
            if let Ok(response) = status {
                let body: Value = response.json().await.unwrap_or(Value::Null);
                if body["value"]["ready"] == true {
                    break;
                }
            }
            if let Ok(Some(exit)) = driver.try_wait() {
                panic!("chromedriver exited before it was ready: {exit}");
            }
            if started.elapsed() > WAIT {
                let _ = driver.kill();
                let _ = driver.wait();
                panic!("chromedriver on port {port} not ready within {WAIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().expect("a profile dir");
        let args = [
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-quic".to_owned(),
            format!("--user-data-dir={}", profile.path().display()),
            "--window-size=1400,900".to_owned(),
        ];
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("browserName".to_owned(), json!("chrome"));
        capabilities.insert("goog:chromeOptions".to_owned(), json!({ "binary": CHROMIUM, "args": args }));
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let session = ClientBuilder::new(connector).capabilities(capabilities).connect(&url).await;
        let client = match session {
            Ok(client) => client,
            Err(error) => {
                let _ = driver.kill();
                let _ = driver.wait();
                panic!("no Chromium session through chromedriver: {error}");
            }
        };
        let session = client.session_id().await.ok().flatten();
        Self { client, driver, port, session, closed: false, _profile: profile }
    }

    /// Ends the session (Chromium quits) and chromedriver.
    pub async fn close(mut self) {
        self.closed = true;
        let _ = self.client.clone().close().await;
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap_or_else(|error| panic!("open {url}: {error}"));
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page; its return value.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.client.execute(script, args).await.unwrap_or_else(|error| panic!("script {script}: {error}"))
    }

    /// Waits (at most [`WAIT`]) for an element matching `css`; `what` names it in the failure,
    /// which also carries the page's current text.
    pub async fn wait_for(&self, css: &str, what: &str) -> fantoccini::elements::Element {
        let found =
            self.client.wait().at_most(WAIT).every(Duration::from_millis(100)).for_element(Locator::Css(css)).await;
        match found {
            Ok(element) => element,
            Err(error) => {
                panic!("{what}: no `{css}` within {WAIT:?} ({error}); the page has:\n{}", self.describe().await)
            }
        }
    }

    /// Clicks the element matching `css` once it is there, finding it again if the page
    /// redrew it in between (a stale reference), within [`WAIT`].
    pub async fn click(&self, css: &str, what: &str) {
        let started = Instant::now();
        loop {
            let element = self.wait_for(css, what).await;
            match element.click().await {
                Ok(()) => return,
                Err(error) if started.elapsed() < WAIT && error.to_string().contains("stale element") => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(error) => panic!("{what}: clicking `{css}` failed: {error}"),
            }
        }
    }

    /// Waits (at most [`WAIT`]) until `script` (a function body) returns a truthy value; returns it.
    pub async fn wait_until(&self, script: &str, what: &str) -> Value {
        let started = Instant::now();
        loop {
            let value = self.js(script, Vec::new()).await;
            if !matches!(value, Value::Null | Value::Bool(false)) && value != json!("") && value != json!(0) {
                return value;
            }
            if started.elapsed() > WAIT {
                panic!("{what}: `{script}` still {value} after {WAIT:?}; the page has:\n{}", self.describe().await);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether any element matches `css` now.
    pub async fn exists(&self, css: &str) -> bool {
        self.js("return document.querySelector(arguments[0]) !== null;", vec![json!(css)]).await == true
    }

    /// How many elements match `css` now.
    pub async fn count(&self, css: &str) -> u64 {
        let count = self.js("return document.querySelectorAll(arguments[0]).length;", vec![json!(css)]).await;
        count.as_u64().unwrap_or(0)
    }

    /// The text of the first element matching `css` (`None` when there is none).
    pub async fn text_of(&self, css: &str) -> Option<String> {
        let script = "const e = document.querySelector(arguments[0]); return e === null ? null : e.textContent;";
        self.js(script, vec![json!(css)]).await.as_str().map(str::to_owned)
    }

    /// The location, and the page's main element with its attributes and a cut of its text:
    /// what a failed wait shows.
    pub async fn describe(&self) -> String {
        let script = r#"
            const main = document.querySelector('section[id$="-page"]') || document.querySelector('form#sign-in') || document.body;
            const attrs = main ? Array.from(main.attributes).map(a => a.name + '=' + JSON.stringify(a.value)).join(' ') : '';
            const text = document.body ? document.body.innerText : '';
            const html = document.body ? document.body.outerHTML : '';
            return location.href + '\n<' + (main ? main.tagName.toLowerCase() : '?') + ' ' + attrs + '>\ntext: ' + text.slice(0, 1500) + '\nhtml: ' + html.slice(0, 3000);
        "#;
        match self.client.execute(script, Vec::new()).await {
            Ok(value) => value.as_str().unwrap_or_default().to_owned(),
            Err(error) => format!("(the page could not be read: {error})"),
        }
    }

    /// Writes a PNG of the window to `target/test-artifacts/ui/NAME.png`; returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.unwrap_or_else(|error| panic!("screenshot {name}: {error}"));
        let dir = target_dir().join("test-artifacts").join("ui");
        std::fs::create_dir_all(&dir).expect("the artifacts dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("the screenshot is written");
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.closed {
            // A failed test: no async runtime to end the session from here, so the session's
            // DELETE goes to chromedriver by hand (Chromium quits), before chromedriver ends.
            if let Some(session) = &self.session {
                delete_session(self.port, session);
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// `DELETE /session/ID` to the chromedriver on `port`, blocking, bounded by [`WAIT`].
fn delete_session(port: u16, session: &str) {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return };
    let _ = stream.set_read_timeout(Some(WAIT));
    let request =
        format!("DELETE /session/{session} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_ok() {
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
    }
}
