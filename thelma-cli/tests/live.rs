//! `thelma run --live` end to end over its WebSocket: the page's messages, steering logged in
//! `summary.json`, a checkpoint taken after steering that resumes bit for bit, garbage and
//! out-of-range commands (and a viewer that never reads) leaving the run's populations untouched,
//! the access token, and bad addresses refused with one line and exit 2.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::SinkExt;
use serde_json::{json, Value};
use thelma_cli::checkpoint;
use tokio_tungstenite::tungstenite::Message;

mod common;
use common::thelma;

/// A `thelma run --live 127.0.0.1:0 ...` child and its page's address; killed when dropped.
struct Live {
    child: Child,
    url: String,
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Live {
    /// Starts `thelma run ARGS --live 127.0.0.1:0` on the CPU module and reads the page's address
    /// from its first line.
    fn start(args: &[&str]) -> Live {
        let mut child = Command::new(env!("CARGO_BIN_EXE_thelma"))
            .args(["run", "--backend", "cpu", "--live", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("thelma runs");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("a first line").unwrap();
        let url = first
            .strip_prefix("live view: ")
            .unwrap_or_else(|| panic!("the first line names the page: {first}"))
            .to_string();
        // The rest of the output is read (and dropped) so that the run never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Live { child, url }
    }

    /// The socket's address: the page's, at `/ws`, with the same query (the token).
    fn ws(&self) -> String {
        let rest = self.url.strip_prefix("http://").unwrap();
        let (host, query) = rest.split_once('/').unwrap();
        format!("ws://{host}/ws{query}")
    }

    /// Waits for the run to end, successfully.
    fn finish(mut self) {
        let t = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                assert!(s.success(), "the live run failed: {s}");
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(240),
                "the run did not end"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A viewer over the socket.
struct Viewer {
    ws: Socket,
}

impl Viewer {
    async fn connect(url: &str) -> Viewer {
        let (ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("the socket opens");
        Viewer { ws }
    }

    async fn send(&mut self, v: Value) {
        self.ws.send(Message::text(v.to_string())).await.unwrap();
    }

    async fn raw(&mut self, m: Message) {
        self.ws.send(m).await.unwrap();
    }

    /// The next message of type `kind` (others are skipped), within 60 s.
    async fn next(&mut self, kind: &str) -> Value {
        self.next_where(kind, |_| true).await
    }

    /// The next message of type `kind` for which `pick` holds, within 60 s.
    async fn next_where(&mut self, kind: &str, pick: impl Fn(&Value) -> bool) -> Value {
        use futures_util::StreamExt;
        let wait = async {
            loop {
                match self.ws.next().await {
                    Some(Ok(Message::Text(t))) => {
                        let v: Value = serde_json::from_str(t.as_str()).unwrap();
                        if v["type"] == kind && pick(&v) {
                            return v;
                        }
                    }
                    Some(Ok(_)) => {}
                    other => panic!("the socket ended waiting for {kind}: {other:?}"),
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .unwrap_or_else(|_| panic!("no {kind} message within 60 s"))
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn summary(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

fn actions(s: &Value) -> Vec<String> {
    s["steering"].as_array().map_or(Vec::new(), |a| {
        a.iter()
            .map(|r| r["action"].as_str().unwrap().to_string())
            .collect()
    })
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("thelma-live-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn steering_is_logged_and_a_checkpoint_after_it_resumes_bit_for_bit() {
    let a = tmp("steered");
    let b = tmp("resumed");
    let live = Live::start(&[
        "--size",
        "16",
        "--re",
        "100",
        "--steps",
        "600",
        "--checkpoint-every",
        "600",
        "--live-every",
        "5",
        "--live-ms",
        "10",
        "-o",
        a.to_str().unwrap(),
    ]);
    runtime().block_on(async {
        let mut v = Viewer::connect(&live.ws()).await;
        let hello = v.next("hello").await;
        assert_eq!(hello["size"], json!([16, 16, 16]));
        assert_eq!(hello["walls"][0]["label"], "lid (z+)");
        assert_eq!(hello["walls"][0]["speed"], 0.1);
        let names: Vec<&str> = hello["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["speed", "ux", "uy", "uz", "pressure", "vorticity"],
            "no temperature without a temperature lattice"
        );
        // A picture of the default view: the speed on the mid-plane y = 8, as a 16 × 16 PNG.
        let frame = v.next("frame").await;
        assert_eq!(
            (frame["field"].as_str(), frame["axis"].as_str()),
            (Some("speed"), Some("y"))
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(frame["png"].as_str().unwrap())
            .unwrap();
        assert_eq!(&png[1..4], b"PNG");
        assert_eq!(
            (frame["width"].as_u64(), frame["height"].as_u64()),
            (Some(16), Some(16))
        );
        assert!(frame["max"].as_f64().unwrap() > 0.0);
        // Paused: nothing runs until resumed; every change lands on the same step boundary.
        v.send(json!({"cmd": "pause"})).await;
        let at = v.next("ack").await["step"].as_u64().unwrap();
        v.send(json!({"cmd": "wall", "slot": 0, "speed": 0.05}))
            .await;
        let wall = v.next("ack").await;
        assert_eq!(
            (wall["cmd"].as_str(), wall["step"].as_u64()),
            (Some("wall"), Some(at))
        );
        v.send(json!({"cmd": "checkpoint"})).await;
        assert_eq!(v.next("ack").await["cmd"], "checkpoint");
        // The checkpoint of the steered run, taken while it is paused, resumes elsewhere.
        std::fs::create_dir_all(&b).unwrap();
        std::fs::copy(a.join(checkpoint::FILE_NAME), b.join(checkpoint::FILE_NAME)).unwrap();
        v.send(json!({"cmd": "view", "field": "vorticity", "axis": "x", "index": 3}))
            .await;
        assert_eq!(v.next("ack").await["cmd"], "view");
        // Pictures made before the change may still be on their way: the first of the new view.
        let frame = v.next_where("frame", |f| f["field"] == "vorticity").await;
        assert_eq!(
            (
                frame["field"].as_str(),
                frame["axis"].as_str(),
                frame["index"].as_u64()
            ),
            (Some("vorticity"), Some("x"), Some(3))
        );
        assert_eq!(
            frame["step"].as_u64(),
            Some(at),
            "the run stepped while paused"
        );
        v.send(json!({"cmd": "resume"})).await;
        assert_eq!(v.next("ack").await["cmd"], "resume");
        let end = v.next("end").await;
        assert_eq!(end["step"], 600);
    });
    live.finish();
    let s = summary(&a);
    assert_eq!(
        actions(&s),
        ["pause", "wall", "checkpoint", "view", "resume"]
    );
    let steps: Vec<u64> = s["steering"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["step"].as_u64().unwrap())
        .collect();
    assert!(
        steps.iter().all(|&t| t == steps[0] && t > 0 && t < 600),
        "{steps:?}"
    );
    assert_eq!(s["steering"][1]["speed"], 0.05);
    // Resumed from the checkpoint taken after the lid slowed, without a live view: the same
    // populations at step 600, and the lid still slowed in its own checkpoint.
    let (code, _, err) = thelma(&["run", "--resume", b.to_str().unwrap(), "--quiet"]);
    assert_eq!(code, 0, "{err}");
    let got = checkpoint::load(&b).unwrap();
    let want = checkpoint::load(&a).unwrap();
    assert_eq!((got.header.step, want.header.step), (600, 600));
    assert!(
        got.populations == want.populations,
        "the resumed run differs"
    );
    assert_eq!(got.header.walls, Some(vec![[0.05, 0.0, 0.0]]));
    assert_eq!(want.header.walls, got.header.walls);
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

#[test]
fn garbage_and_out_of_range_commands_and_a_stalled_viewer_leave_the_run_untouched() {
    let common = [
        "--size",
        "14",
        "--re",
        "80",
        "--steps",
        "400",
        "--checkpoint-every",
        "400",
    ];
    let plain = tmp("plain");
    let mut args: Vec<&str> = vec!["run", "--backend", "cpu", "--quiet"];
    args.extend(common);
    args.extend(["-o", plain.to_str().unwrap()]);
    let (code, _, err) = thelma(&args);
    assert_eq!(code, 0, "{err}");
    let hit = tmp("hit");
    let mut args: Vec<&str> = common.to_vec();
    args.extend([
        "--live-every",
        "2",
        "--live-ms",
        "0",
        "-o",
        hit.to_str().unwrap(),
    ]);
    let live = Live::start(&args);
    runtime().block_on(async {
        // A viewer that connects and never reads: only it falls behind.
        let stalled = Viewer::connect(&live.ws()).await;
        let mut v = Viewer::connect(&live.ws()).await;
        v.next("frame").await;
        let bad = [
            "garbage",
            "{}",
            r#"{"cmd":"fly"}"#,
            r#"{"cmd":"pause","now":true}"#,
            r#"{"cmd":"wall","slot":3,"speed":0.05}"#,
            r#"{"cmd":"wall","slot":0,"speed":-0.01}"#,
            r#"{"cmd":"wall","slot":0,"speed":0.4}"#,
            r#"{"cmd":"wall","slot":0,"speed":1e999}"#,
            r#"{"cmd":"wall","slot":0,"speed":"fast"}"#,
            r#"{"cmd":"view","field":"speed","axis":"y","index":14}"#,
            r#"{"cmd":"view","field":"speed","axis":"w","index":1}"#,
            r#"{"cmd":"view","field":"temperature","axis":"y","index":1}"#,
            r#"{"cmd":"view","field":"speed","axis":"y","index":-1}"#,
        ];
        for b in bad {
            v.raw(Message::text(b)).await;
            let r = v.next("refused").await;
            assert!(!r["message"].as_str().unwrap().is_empty(), "{b}");
        }
        v.raw(Message::binary(vec![1u8, 2, 3])).await;
        v.next("refused").await;
        // An oversized message closes that viewer's socket, and only that.
        let mut big = Viewer::connect(&live.ws()).await;
        let _ = big
            .ws
            .send(Message::text(format!(
                r#"{{"cmd":"pause","pad":"{}"}}"#,
                "x".repeat(70_000)
            )))
            .await;
        let end = v.next("end").await;
        assert_eq!(end["step"], 400);
        drop(stalled);
    });
    live.finish();
    assert!(
        actions(&summary(&hit)).is_empty(),
        "a refused command was logged"
    );
    let want = checkpoint::load(&plain).unwrap();
    let got = checkpoint::load(&hit).unwrap();
    assert_eq!(got.header.step, 400);
    assert!(
        got.populations == want.populations,
        "the live run's populations differ from the untouched run's"
    );
    assert_eq!(got.header.walls, None);
    let _ = std::fs::remove_dir_all(&plain);
    let _ = std::fs::remove_dir_all(&hit);
}

/// A heated box in lattice units: the floor at 0.5, the ceiling at −0.5, gravity along −z, an
/// inlet patch on x− at 0.25 and an outflow on x+.
const HEATED: &str = "[domain]\ncase = \"box\"\nsize = [12, 10, 12]\n\
    [physics]\nviscosity = 0.05\n[output]\nvtk = false\nimages = false\n\
    [thermal]\nprandtl = 0.71\nbeta = 1.0\ngravity = [0.0, 0.0, -1e-4]\nt0 = 0.0\n\
    [[boundary]]\nface = \"z-\"\ntemperature = 0.5\n\
    [[boundary]]\nface = \"z+\"\ntemperature = -0.5\n\
    [[boundary]]\nface = \"x-\"\nkind = \"velocity\"\nvelocity = [0.02, 0.0, 0.0]\n\
    temperature = 0.25\npatch = { min = [3.0, 3.0], max = [6.0, 8.0] }\n\
    [[boundary]]\nface = \"x+\"\nkind = \"outflow\"\n";

#[test]
fn a_steered_temperature_is_logged_checked_and_resumes_bit_for_bit() {
    let a = tmp("heated");
    let b = tmp("heated-resumed");
    std::fs::create_dir_all(&a).unwrap();
    let case = a.join("heated.toml");
    std::fs::write(&case, HEATED).unwrap();
    let live = Live::start(&[
        "--config",
        case.to_str().unwrap(),
        "--steps",
        "300",
        "--checkpoint-every",
        "300",
        "--live-every",
        "5",
        "--live-ms",
        "10",
        "-o",
        a.join("out").to_str().unwrap(),
    ]);
    runtime().block_on(async {
        let mut v = Viewer::connect(&live.ws()).await;
        let hello = v.next("hello").await;
        let temps = hello["temperatures"].as_array().unwrap();
        let labels: Vec<&str> = temps.iter().map(|t| t["label"].as_str().unwrap()).collect();
        assert_eq!(labels, ["wall (z-)", "wall (z+)", "inlet patch (x-)"]);
        assert_eq!(temps[2]["value"], 0.25);
        assert_eq!(temps[2]["unit"], "lattice");
        // |θ| < 0.4² / (|β g| H) = 0.16 / (1e-4 · 12): about 133.
        let max = temps[2]["max"].as_f64().unwrap();
        assert!((max - 0.16 / 12e-4).abs() < 1e-9, "{max}");
        for bad in [
            json!({"cmd": "temperature", "slot": 2, "value": 200.0}),
            json!({"cmd": "temperature", "slot": 3, "value": 0.1}),
            json!({"cmd": "temperature", "slot": 0}),
        ] {
            v.send(bad.clone()).await;
            let r = v.next("refused").await;
            assert!(!r["message"].as_str().unwrap().is_empty(), "{bad}");
        }
        v.send(json!({"cmd": "pause"})).await;
        let at = v.next("ack").await["step"].as_u64().unwrap();
        v.send(json!({"cmd": "temperature", "slot": 2, "value": 0.8}))
            .await;
        let ack = v.next("ack").await;
        assert_eq!(
            (ack["cmd"].as_str(), ack["step"].as_u64()),
            (Some("temperature"), Some(at))
        );
        assert_eq!(ack["detail"], "inlet patch (x-) temperature 0.8 lattice");
        v.send(json!({"cmd": "checkpoint"})).await;
        assert_eq!(v.next("ack").await["cmd"], "checkpoint");
        std::fs::create_dir_all(&b).unwrap();
        std::fs::copy(
            a.join("out").join(checkpoint::FILE_NAME),
            b.join(checkpoint::FILE_NAME),
        )
        .unwrap();
        // A viewer connecting now is told the steered value.
        let mut late = Viewer::connect(&live.ws()).await;
        assert_eq!(late.next("hello").await["temperatures"][2]["value"], 0.8);
        v.send(json!({"cmd": "resume"})).await;
        assert_eq!(v.next("ack").await["cmd"], "resume");
        assert_eq!(v.next("end").await["step"], 300);
    });
    live.finish();
    let s = summary(&a.join("out"));
    assert_eq!(
        actions(&s),
        ["pause", "temperature", "checkpoint", "resume"]
    );
    assert_eq!(s["steering"][1]["value"], 0.8);
    assert_eq!(s["steering"][1]["slot"], 2);
    // Resumed without the live view from the checkpoint taken after the change: the same
    // populations at step 300, the inlet still at 0.8 in its own checkpoint.
    let (code, _, err) = thelma(&["run", "--resume", b.to_str().unwrap(), "--quiet"]);
    assert_eq!(code, 0, "{err}");
    let got = checkpoint::load(&b).unwrap();
    let want = checkpoint::load(&a.join("out")).unwrap();
    assert_eq!((got.header.step, want.header.step), (300, 300));
    assert!(
        got.populations == want.populations,
        "the resumed run differs"
    );
    let held = got.header.held.clone().expect("the steered table is kept");
    assert_eq!(held, [0.0, 0.0, 0.0, 0.0, 0.5, -0.5, 0.8]);
    assert_eq!(want.header.held, got.header.held);
    assert_eq!(got.header.walls, None);
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

/// An HTTP GET of `path` on `addr`: the status code.
fn get(addr: &str, path: &str) -> u16 {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_remote_view_needs_its_token_on_every_request() {
    let dir = tmp("token");
    let live = Live::start(&[
        "--live-remote",
        "--size",
        "10",
        "--re",
        "100",
        "--steps",
        "100000",
        "-o",
        dir.to_str().unwrap(),
    ]);
    let rest = live.url.strip_prefix("http://").unwrap();
    let (addr, query) = rest.split_once("/?token=").expect("a token in the address");
    assert_eq!(query.len(), 32);
    assert_eq!(get(addr, "/"), 403);
    assert_eq!(get(addr, "/?token=0123"), 403);
    assert_eq!(get(addr, "/ws"), 403);
    assert_eq!(get(addr, "/frame.png"), 403);
    assert_eq!(get(addr, &format!("/?token={query}")), 200);
    runtime().block_on(async {
        let mut v = Viewer::connect(&live.ws()).await;
        v.next("hello").await;
        v.send(json!({"cmd": "stop"})).await;
        v.next("end").await;
    });
    live.finish();
    assert_eq!(actions(&summary(&dir)), ["stop"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_live_addresses_give_one_line_naming_the_option_and_exit_2() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let dir = tmp("bad");
    let o = dir.to_str().unwrap();
    let in_use = format!("127.0.0.1:{port}");
    let cases: &[(&[&str], &str)] = &[
        (&["--live", &in_use], "--live"),
        (&["--live", "0.0.0.0:0"], "--live-remote"),
        (&["--live", "localhost"], "--live"),
        (&["--live", "127.0.0.1:70000"], "--live"),
        (
            &["--live", "127.0.0.1:0", "--live-every", "0"],
            "--live-every",
        ),
        (&["--live-every", "5"], "--live"),
    ];
    for (extra, flag) in cases {
        let mut args = vec!["run", "--size", "8", "--steps", "10", "-o", o];
        args.extend_from_slice(extra);
        let (code, _, err) = thelma(&args);
        assert_eq!(code, 2, "{extra:?}: exit {code}, {err}");
        assert!(err.contains(flag), "{extra:?}: {err}");
        assert!(!err.contains("panicked"), "{extra:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{extra:?}: {err}");
        assert!(!dir.exists(), "{extra:?} wrote {}", dir.display());
    }
    drop(taken);
}
