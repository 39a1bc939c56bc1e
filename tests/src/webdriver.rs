//! Headless Chromium driven over WebDriver, for the web fleet view's test.
//!
//! Debian's `chromium` and `chromium-driver` packages (`.ci/run` and
//! `scripts/test.sh` install them); this module speaks the W3C WebDriver
//! protocol to `chromedriver` with the reqwest client the tests already
//! use, so no browser-automation crate is added for the handful of
//! commands the test needs (new session, navigate, execute script, find,
//! keys, click, screenshot, browser log).
//!
//! Network safety: chromedriver listens on 127.0.0.1 and accepts only
//! 127.0.0.1; the browser runs with background networking off, every host
//! name but 127.0.0.1 unresolvable and a proxy on a closed loopback port
//! for anything that is not loopback, so it can reach nothing but the hub
//! on loopback.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::procs::Proc;

/// The WebDriver key code of Enter.
pub const ENTER: &str = "\u{E007}";

/// What the test needs installed, with the fix.
fn find_program(names: &[&str], env: &str) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in names {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    bail!(
        "{} not found (PATH, or {env}): the web view test needs headless Chromium and its \
         WebDriver; install them with `apt-get install -y chromium chromium-driver` \
         (.ci/run and scripts/test.sh do)",
        names.join(" / ")
    )
}

/// One browser session behind its own chromedriver; both end on drop.
pub struct Browser {
    http: reqwest::Client,
    /// `http://127.0.0.1:<port>/session/<id>`
    session: String,
    driver_port: u16,
    session_id: String,
    browser_pid: Option<u32>,
    driver: Proc,
    _profile: tempfile::TempDir,
}

/// Between the start polls: fails once chromedriver has exited or
/// `deadline` has passed.
fn still_starting(driver: &mut Proc, deadline: Instant) -> Result<()> {
    ensure!(
        driver.alive(),
        "chromedriver exited: {}",
        driver.stderr_text()
    );
    ensure!(Instant::now() < deadline, "chromedriver did not start");
    Ok(())
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session of
    /// `width`x`height`; logs go to `logs`.
    pub async fn start(logs: &Path, width: u32, height: u32) -> Result<Self> {
        let chromedriver = find_program(&["chromedriver"], "CLAWFED_CHROMEDRIVER")?;
        let chromium = find_program(&["chromium", "chromium-browser"], "CLAWFED_CHROMIUM")?;
        // Port 0: chromedriver binds a free one and prints it.
        let mut command = std::process::Command::new(&chromedriver);
        command
            .arg("--port=0")
            // No --log-path: its INFO log would record the keys typed.
            .arg("--allowed-ips=127.0.0.1");
        let tag = format!("chromedriver-{}", uuid::Uuid::new_v4().simple());
        let mut driver = Proc::spawn(&tag, &mut command, logs)?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        let port = loop {
            let started = driver
                .stdout_text()
                .lines()
                .find_map(|l| l.strip_prefix("ChromeDriver was started successfully on port "))
                .and_then(|p| p.trim_end_matches('.').parse::<u16>().ok());
            if let Some(port) = started {
                break port;
            }
            still_starting(&mut driver, deadline)?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let base = format!("http://127.0.0.1:{port}");
        loop {
            let ready = http
                .get(format!("{base}/status"))
                .send()
                .await
                .ok()
                .map(|r| r.status().is_success())
                .unwrap_or(false);
            if ready {
                break;
            }
            still_starting(&mut driver, deadline)?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir()?;
        let args = [
            "--headless=new".to_owned(),
            // Root in a container: Chromium's sandbox needs user namespaces.
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.path().display()),
            "--lang=en-US".into(),
            "--no-first-run".into(),
            "--no-default-browser-check".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-default-apps".into(),
            "--disable-extensions".into(),
            "--disable-domain-reliability".into(),
            "--disable-client-side-phishing-detection".into(),
            "--no-pings".into(),
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1".into(),
            "--proxy-server=127.0.0.1:9".into(),
        ];
        let caps = json!({
            "capabilities": { "alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": { "binary": chromium, "args": args },
                "goog:loggingPrefs": { "browser": "ALL" }
            }}
        });
        let answer: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await?
            .json()
            .await?;
        let value = &answer["value"];
        let Some(session_id) = value["sessionId"].as_str() else {
            bail!("chromedriver refused the session: {value}");
        };
        let browser_pid = value["capabilities"]["goog:processID"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok());
        Ok(Self {
            http,
            session: format!("{base}/session/{session_id}"),
            driver_port: port,
            session_id: session_id.to_owned(),
            browser_pid,
            driver,
            _profile: profile,
        })
    }

    async fn command(&self, method: reqwest::Method, path: &str, body: Value) -> Result<Value> {
        let url = format!("{}{path}", self.session);
        let mut req = self.http.request(method, &url);
        if !body.is_null() {
            req = req.json(&body);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("WebDriver {path}"))?;
        let status = resp.status();
        let mut answer: Value = resp.json().await?;
        let value = answer["value"].take();
        ensure!(
            status.is_success(),
            "WebDriver {path}: {status} {}",
            value["message"].as_str().unwrap_or_default()
        );
        Ok(value)
    }

    /// Navigates to `url` and waits for its load.
    pub async fn goto(&self, url: &str) -> Result<()> {
        self.command(reqwest::Method::POST, "/url", json!({ "url": url }))
            .await
            .map(drop)
    }

    /// Reloads the page.
    pub async fn refresh(&self) -> Result<()> {
        self.command(reqwest::Method::POST, "/refresh", json!({}))
            .await
            .map(drop)
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) in the
    /// page and returns its result.
    pub async fn eval<T: DeserializeOwned>(&self, script: &str, args: Vec<Value>) -> Result<T> {
        let value = self
            .command(
                reqwest::Method::POST,
                "/execute/sync",
                json!({ "script": script, "args": args }),
            )
            .await?;
        serde_json::from_value(value.clone())
            .with_context(|| format!("script result {value} for: {script}"))
    }

    /// Polls `script` every 25 ms until it returns something other than
    /// null/undefined, failing after `within` with the last page state.
    pub async fn wait_for<T: DeserializeOwned>(
        &self,
        within: Duration,
        what: &str,
        script: &str,
        args: Vec<Value>,
    ) -> Result<T> {
        let deadline = Instant::now() + within;
        loop {
            let value: Value = self.eval(script, args.clone()).await?;
            if !value.is_null() {
                return serde_json::from_value(value).context(what.to_owned());
            }
            if Instant::now() >= deadline {
                let page: String = self
                    .eval("return document.body.innerText", vec![])
                    .await
                    .unwrap_or_default();
                bail!("timed out after {within:?} waiting for {what}; the page said:\n{page}");
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The first element matching `css`: its WebDriver reference.
    pub async fn find(&self, css: &str) -> Result<String> {
        let value = self
            .command(
                reqwest::Method::POST,
                "/element",
                json!({ "using": "css selector", "value": css }),
            )
            .await
            .with_context(|| format!("find {css}"))?;
        value
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .map(str::to_owned)
            .with_context(|| format!("element reference for {css}: {value}"))
    }

    /// Types `text` into the element (focusing it first, as a user would).
    pub async fn send_keys(&self, element: &str, text: &str) -> Result<()> {
        self.command(
            reqwest::Method::POST,
            &format!("/element/{element}/value"),
            json!({ "text": text }),
        )
        .await
        .map(drop)
    }

    /// Presses and releases `key` on whatever has the keyboard focus, as
    /// a keyboard would (WebDriver actions).
    pub async fn press(&self, key: &str) -> Result<()> {
        let actions = json!({ "actions": [{
            "type": "key", "id": "keyboard",
            "actions": [{ "type": "keyDown", "value": key }, { "type": "keyUp", "value": key }]
        }]});
        self.command(reqwest::Method::POST, "/actions", actions)
            .await?;
        self.command(reqwest::Method::DELETE, "/actions", Value::Null)
            .await
            .map(drop)
    }

    /// Clicks the element.
    pub async fn click(&self, element: &str) -> Result<()> {
        self.command(
            reqwest::Method::POST,
            &format!("/element/{element}/click"),
            json!({}),
        )
        .await
        .map(drop)
    }

    /// Saves a PNG of the viewport to `path`.
    pub async fn screenshot(&self, path: &Path) -> Result<()> {
        let value = self
            .command(reqwest::Method::GET, "/screenshot", Value::Null)
            .await?;
        let png = decode_base64(value.as_str().context("screenshot data")?)?;
        ensure!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))
    }

    /// The browser console's entries since the last call (chromedriver's
    /// log endpoint): CSP violations and script errors show up here.
    pub async fn console(&self) -> Result<Vec<String>> {
        let value = self
            .command(
                reqwest::Method::POST,
                "/se/log",
                json!({ "type": "browser" }),
            )
            .await?;
        Ok(value
            .as_array()
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| {
                        format!(
                            "{} {}",
                            e["level"].as_str().unwrap_or_default(),
                            e["message"].as_str().unwrap_or_default()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Ends the session (the browser quits) and chromedriver.
    pub async fn close(mut self) {
        let _ = self.command(reqwest::Method::DELETE, "", Value::Null).await;
        self.browser_pid = None;
        self.driver.terminate().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Not closed (a failed test): end the session with a plain blocking
        // request, then make sure the browser is gone before chromedriver.
        if let Some(pid) = self.browser_pid.take() {
            let request = format!(
                "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                self.session_id
            );
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.driver_port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = s.write_all(request.as_bytes());
                let _ = s.read_to_end(&mut Vec::new());
            }
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// Standard base64 (WebDriver screenshots), padding optional.
fn decode_base64(text: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
    {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => bail!("not base64: {:?}", c as char),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64("aGVsbG8hIQ==").unwrap(), b"hello!!");
        assert_eq!(decode_base64("AAEC/w").unwrap(), [0, 1, 2, 255]);
        assert!(decode_base64("a*b").is_err());
    }
}
