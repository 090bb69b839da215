//! The live view in a real browser: headless Chromium, driven through ChromeDriver, watches a cavity
//! run, pauses and resumes it, steers the lid and the slice, and stops it; `summary.json` must then
//! record every change in order.
//!
//! Set `THELMA_SCREENSHOT=1` to also refresh `docs/live-view.png` from the page as the test saw it.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The longest any one thing may take to show on the page: CI is a slow machine of two cores.
const WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(100);

/// Kills a process the test started when the test ends, passed or failed, so that no solver or
/// browser outlives it. `group`: the process leads a process group of its own (ChromeDriver, whose
/// browsers would otherwise be left running when it is killed), and the whole group goes.
struct Reaper {
    child: Child,
    group: bool,
}

impl Drop for Reaper {
    fn drop(&mut self) {
        #[cfg(unix)]
        if self.group {
            // The group's id is the leader's pid; a negative pid signals the whole group.
            let pgid = self.child.id() as libc::pid_t;
            // SAFETY: kill only sends a signal; the group is the one this test created.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nobody listens on now: the OS picks it, and it is free again once the listener drops.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a loopback port is free")
        .port()
}

/// Starts ChromeDriver on a free port and waits until it takes connections.
fn chromedriver() -> (Reaper, u16) {
    for tool in [CHROMIUM, CHROMEDRIVER] {
        // A missing browser must fail the test, not skip it: CI would otherwise pass untested.
        assert!(
            Path::new(tool).exists(),
            "{tool} is missing: scripts/setup installs chromium and chromedriver (chromium-driver)"
        );
    }
    let port = free_port();
    let mut cmd = Command::new(CHROMEDRIVER);
    cmd.arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let mut driver = Reaper {
        child: cmd.spawn().expect("chromedriver starts"),
        group: cfg!(unix),
    };
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = driver.child.try_wait() {
            panic!("chromedriver exited before it listened on port {port}: {status}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "chromedriver did not listen on port {port} within 10 s"
        );
        std::thread::sleep(POLL);
    }
    (driver, port)
}

/// Starts a cavity run long enough never to end by itself, serving its live view on a port the OS
/// picks, and returns it with the page's address (which the run prints on its first lines).
fn solver(out: &Path) -> (Reaper, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_thelma"))
        .args([
            "run",
            "--backend",
            "cpu",
            "--size",
            "24",
            "--re",
            "100",
            "--steps",
            "200000",
            "--live",
            "127.0.0.1:0",
            "--live-ms",
            "50",
            "--live-every",
            "5",
            "-o",
            out.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("thelma runs");
    let mut run = Reaper {
        child,
        group: false,
    };
    let stdout = run.child.stdout.take().expect("stdout is piped");
    // The run keeps printing progress: a thread drains the pipe for its whole life, so that a full
    // pipe never blocks the solver, and hands each line over.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(url) = line.strip_prefix("live view: ") {
                    assert!(url.starts_with("http://127.0.0.1:"), "{line}");
                    return (run, url.trim().to_string());
                }
                seen.push(line);
            }
            Err(e) => panic!(
                "thelma printed no `live view:` line ({e}); its output so far:\n{}",
                seen.join("\n")
            ),
        }
    }
}

/// Polls `probe` every 100 ms until it gives a value, for up to [`WAIT`]; `what` names the wait
/// in the failure, with the last thing `probe` saw.
async fn until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(last) if start.elapsed() > WAIT => {
                panic!("timed out after {WAIT:?} waiting for {what}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// What the page holds now: a script's result, read in one go so that its parts agree.
async fn read(c: &Client, script: &str) -> Value {
    c.execute(script, Vec::new())
        .await
        .expect("the script runs")
}

/// The text of the element with id `id`.
async fn text(c: &Client, id: &str) -> String {
    let v = c
        .execute(
            "return document.getElementById(arguments[0]).textContent",
            vec![json!(id)],
        )
        .await
        .expect("the script runs");
    v.as_str().unwrap_or_default().to_string()
}

/// The log's lines, oldest first.
async fn log_lines(c: &Client) -> Vec<String> {
    let v = read(
        c,
        "return [...document.querySelectorAll('#log li')].map((li) => li.textContent);",
    )
    .await;
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(String::from)
        .collect()
}

/// Waits until the run's state badge reads `state`.
async fn state_is(c: &Client, state: &str) {
    until(&format!("the state `{state}`"), || async move {
        let now = text(c, "state").await;
        if now == state {
            return Ok(());
        }
        // What the run and the log show tells a run that never got the command from a page that
        // shows the wrong state.
        let (step, log) = (text(c, "step").await, log_lines(c).await);
        Err(format!("`{now}` at step {step}; the log: {log:?}"))
    })
    .await;
}

/// The step of the picture shown (`None` before the first), and the picture itself.
async fn frame(c: &Client) -> (Option<u64>, String) {
    let v = read(
        c,
        "const f = document.getElementById('frame'); return [f.dataset.step, f.src];",
    )
    .await;
    (
        v[0].as_str().and_then(|s| s.parse().ok()),
        v[1].as_str().unwrap_or_default().to_string(),
    )
}

/// The step the run's figures show (`#step` reads "step / target").
async fn status_step(c: &Client) -> Option<u64> {
    text(c, "step")
        .await
        .split(" / ")
        .next()
        .and_then(|s| s.trim().parse().ok())
}

/// Waits until the picture's step has passed `after`; gives the new step and picture.
async fn frame_after(c: &Client, after: u64) -> (u64, String) {
    until(&format!("a picture after step {after}"), || async move {
        match frame(c).await {
            (Some(s), src) if s > after => Ok((s, src)),
            (s, _) => Err(format!("picture at step {s:?}")),
        }
    })
    .await
}

async fn click(c: &Client, id: &str) {
    c.find(Locator::Id(id))
        .await
        .unwrap_or_else(|e| panic!("#{id}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("clicking #{id}: {e}"));
}

/// Drives the page through the whole session; panics at the first thing it does not show.
async fn drive(client: Client, url: String, shots: PathBuf) {
    // A reference, which every polling closure below can copy into its future.
    let c = &client;
    // Headless Chromium's --window-size is the window's outer size, toolbar included: the page
    // gets the 1280×800 the screenshot is meant to show only once the window grows by the rest.
    let chrome = read(
        c,
        "return [outerWidth - innerWidth, outerHeight - innerHeight]",
    )
    .await;
    let extra = |k: usize| chrome[k].as_u64().map_or(0, |v| v as u32);
    c.set_window_size(1280 + extra(0), 800 + extra(1))
        .await
        .expect("the window resizes");
    c.goto(&url).await.expect("the page opens");
    let viewport = read(c, "return [innerWidth, innerHeight]").await;
    assert_eq!(viewport, json!([1280, 800]), "the page's viewport");
    state_is(c, "running").await;

    // The picture arrives and changes as the flow develops from rest.
    let (first, first_src) = frame_after(c, 0).await;
    assert!(
        first_src.starts_with("data:image/png;base64,"),
        "{first_src:.40}"
    );
    let (second, second_src) = frame_after(c, first).await;
    assert_ne!(
        first_src, second_src,
        "the pictures at steps {first} and {second} are the same"
    );

    // Paused: neither the picture nor the figures move.
    click(c, "pause").await;
    state_is(c, "paused").await;
    assert_eq!(text(c, "pause").await, "Resume");
    // The last picture and figures sent before the pause took hold may still be on their way; the
    // run published both at the step it paused at, so they settle there together.
    let held = until(
        "the picture and the figures to agree at the pause",
        || async move {
            match (frame(c).await.0, status_step(c).await) {
                (Some(f), Some(s)) if f == s => Ok(s),
                other => Err(format!("(picture, figures) steps {other:?}")),
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        frame(c).await.0,
        Some(held),
        "the picture moved while paused"
    );
    assert_eq!(
        status_step(c).await,
        Some(held),
        "the step moved while paused"
    );

    // Resumed: both move on again.
    click(c, "pause").await;
    state_is(c, "running").await;
    assert_eq!(text(c, "pause").await, "Pause");
    frame_after(c, held).await;
    until("the step to move on after resuming", || async move {
        match status_step(c).await {
            Some(s) if s > held => Ok(()),
            s => Err(format!("step {s:?}")),
        }
    })
    .await;

    // A new lid speed, acknowledged in the log.
    let speed = c.find(Locator::Id("wall-0")).await.expect("the lid's box");
    speed.clear().await.expect("the box clears");
    speed.send_keys("0.05").await.expect("typing into the box");
    click(c, "wall-0-set").await;
    let line = until("the log to acknowledge the lid speed", || async move {
        let log = log_lines(c).await;
        match log.iter().find(|l| l.contains("lid") && l.contains("0.05")) {
            Some(l) => Ok(l.clone()),
            None => Err(format!("{log:?}")),
        }
    })
    .await;
    assert!(!line.starts_with("refused"), "{line}");

    // Another slice: the plane z = 12, showing u_x.
    let axis = c.find(Locator::Id("axis")).await.expect("the axis menu");
    axis.select_by_value("z").await.expect("choosing z");
    let field = c.find(Locator::Id("field")).await.expect("the field menu");
    field.select_by_value("ux").await.expect("choosing u_x");
    let title = until("the picture of u_x on a z plane", || async move {
        let t = text(c, "frame-title").await;
        if t.contains("z =") && t.contains("u_x") {
            Ok(t)
        } else {
            Err(t)
        }
    })
    .await;
    assert!(title.contains("z = 12"), "{title}");

    // The menu just chosen keeps its focus ring, which has no place in the documentation's picture.
    read(c, "document.activeElement.blur(); return null").await;
    let png = c.screenshot().await.expect("a screenshot");
    std::fs::write(shots.join("live-view.png"), &png).expect("the screenshot is written");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "the screenshot is no PNG"
    );
    assert!(
        png.len() > 10_000,
        "a {}-byte screenshot is blank",
        png.len()
    );
    if std::env::var("THELMA_SCREENSHOT").as_deref() == Ok("1") {
        let doc = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/live-view.png");
        std::fs::write(doc, &png).expect("docs/live-view.png is written");
    }

    click(c, "stop").await;
    state_is(c, "ended").await;
}

#[test]
fn the_page_shows_the_run_and_steers_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let (_driver, port) = chromedriver();
    let (mut run, url) = solver(&out);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let profile = tmp.path().join("profile");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": CHROMIUM,
                // Without the networking switches Chromium keeps calling home, which floods a
                // machine without a network; the rest keep it quiet and the window a known size.
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--window-size=1280,800",
                    format!("--user-data-dir={}", profile.display()),
                ],
            }),
        );
        let http = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(http)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("chromedriver opens a Chromium session");
        // Driven in a task of its own so that a failed check still closes the browser before the
        // panic goes on.
        let driven = tokio::spawn(drive(client.clone(), url, tmp.path().to_path_buf())).await;
        let _ = client.close().await;
        if let Err(e) = driven {
            std::panic::resume_unwind(e.into_panic());
        }
    });

    // Stopped from the page, the run ends as after Ctrl-C: outputs written, exit status 0.
    let start = Instant::now();
    let status = loop {
        if let Some(s) = run.child.try_wait().expect("waiting for thelma") {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "thelma did not exit within 60 s of Stop"
        );
        std::thread::sleep(POLL);
    };
    assert!(status.success(), "thelma exited with {status}");

    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("summary.json")).expect("summary.json is written"),
    )
    .expect("summary.json is JSON");
    let steering = summary["steering"].as_array().expect("a steering log");
    let mut last = 0;
    for r in steering {
        let step = r["step"].as_u64().unwrap_or_else(|| panic!("no step: {r}"));
        assert!(step >= last, "steps go back in {steering:?}");
        last = step;
    }
    // Every change the page made, in the order it made them, each with the fields it must carry;
    // choosing the axis and then the field sends a view each, so the one with both is looked for.
    let expected = [
        json!({"action": "pause"}),
        json!({"action": "resume"}),
        json!({"action": "wall", "slot": 0, "speed": 0.05}),
        json!({"action": "view", "axis": "z", "field": "ux"}),
        json!({"action": "stop"}),
    ];
    let mut records = steering.iter();
    for want in &expected {
        let want = want.as_object().unwrap();
        assert!(
            records.any(|r| want.iter().all(|(k, v)| &r[k] == v)),
            "no {want:?} in order in {steering:#?}"
        );
    }
    assert_eq!(
        steering.last().map(|r| &r["action"]),
        Some(&json!("stop")),
        "{steering:#?}"
    );
}
