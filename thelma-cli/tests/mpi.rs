//! Cluster jobs over MPI (built with `--features mpi`; Open MPI's `mpirun`, which `scripts/setup`
//! installs): `mpirun -np N thelma run` writes byte for byte what one process writes, whatever
//! the layout, and a bad layout ends every rank with one line and status 2, writing nothing;
//! `thelma comm-bench --transport mpi` measures the exchange of one rank per device.
#![cfg(feature = "mpi")]

mod common;

use std::path::Path;
use std::process::Command;

use common::thelma;

/// `mpirun -np np thelma ARGS`, allowed to run as root and oversubscribed (CI has two cores).
fn mpirun_command<S: AsRef<std::ffi::OsStr>>(np: usize, args: &[S]) -> Command {
    let mut c = Command::new("mpirun");
    c.args([
        "--oversubscribe",
        "--timeout",
        "300",
        "-np",
        &np.to_string(),
    ])
    .arg(env!("CARGO_BIN_EXE_thelma"))
    .args(args)
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    // Containers often forbid the cross-memory attach of Open MPI's shared-memory transport.
    .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
    c
}

fn mpirun(np: usize, args: &[&str]) -> (i32, String, String) {
    let out = mpirun_command(np, args)
        .output()
        .expect("mpirun runs (scripts/setup installs Open MPI)");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Asserts that two runs' outputs are the same files with the same bytes, naming those that differ.
fn assert_same(got: &[(String, Vec<u8>)], want: &[(String, Vec<u8>)], what: &str) {
    let names = |f: &[(String, Vec<u8>)]| f.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(got), names(want), "{what}: other files");
    let differ: Vec<&String> = got
        .iter()
        .zip(want)
        .filter(|(a, b)| a.1 != b.1)
        .map(|(a, _)| &a.0)
        .collect();
    assert!(
        differ.is_empty(),
        "{what}: {differ:?} differ from one process's"
    );
}

/// Every output file of a run but its summary (which holds timings) and its lock (which holds the
/// process id), by name.
fn outputs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    common::outputs(dir, |n| !["summary.json", ".thelma.lock"].contains(&n))
}

const CASE: [&str; 6] = [
    "run",
    "--backend",
    "cpu",
    "--size",
    "16,14,24",
    "--threads=1",
];

#[test]
fn ranks_write_what_one_process_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = |n: &str| tmp.path().join(n);
    let run = |np: usize, extra: &[&str], out: &Path| {
        let mut args: Vec<&str> = CASE.to_vec();
        args.extend_from_slice(extra);
        if !extra.contains(&"--steps") {
            args.extend_from_slice(&["--steps", "40"]);
        }
        args.extend_from_slice(&["-o", out.to_str().unwrap()]);
        let (code, stdout, stderr) = if np == 1 {
            thelma(&args)
        } else {
            mpirun(np, &args)
        };
        assert_eq!(code, 0, "{np} rank(s) {extra:?}: {stdout}\n{stderr}");
        stdout
    };
    run(1, &["--quiet"], &dir("one"));
    let one = outputs(&dir("one"));
    assert!(one.iter().any(|(n, _)| n.ends_with(".vti")), "{one:?}");

    // An even split, one slab per rank; the exchange goes over MPI.
    let stdout = run(2, &[], &dir("two"));
    assert!(
        stdout.contains("exchange: mpi (messages overlapped with the interiors)"),
        "{stdout}"
    );
    assert_same(&outputs(&dir("two")), &one, "2 ranks");
    // The same with whole steps, the messages after them (`THELMA_OVERLAP=0`).
    let mut whole: Vec<&str> = CASE.to_vec();
    let out = dir("whole");
    whole.extend_from_slice(&["--steps", "40", "-o", out.to_str().unwrap()]);
    let done = mpirun_command(2, &whole)
        .env("THELMA_OVERLAP", "0")
        .output()
        .expect("mpirun runs");
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "whole steps: {stdout}");
    assert!(
        stdout.lines().any(|l| l == "exchange: mpi"),
        "whole steps: {stdout}"
    );
    assert_same(&outputs(&out), &one, "2 ranks, whole steps");

    // Uneven subdomains in no order, rank 0 holding two (two CPU devices), ranks out of z order.
    let layout = tmp.path().join("layout.toml");
    std::fs::write(
        &layout,
        "[[subdomain]]\norigin = [0, 0, 5]\nsize = [16, 14, 7]\nrank = 0\ndevice = 0\n\n\
         [[subdomain]]\norigin = [0, 0, 0]\nsize = [16, 14, 5]\nrank = 1\ndevice = 0\n\n\
         [[subdomain]]\norigin = [0, 0, 16]\nsize = [16, 14, 8]\nrank = 0\ndevice = 1\n\n\
         [[subdomain]]\norigin = [0, 0, 12]\nsize = [16, 14, 4]\nrank = 2\ndevice = 0\n",
    )
    .unwrap();
    run(
        3,
        &["--quiet", "--layout", layout.to_str().unwrap()],
        &dir("three"),
    );
    assert_same(&outputs(&dir("three")), &one, "3 ranks on a layout");

    // A 2 x 2 x 2 grid over 4 ranks of two CPU devices: subdomains cut along x, y and z, their
    // faces and edges crossing ranks.
    let grid = tmp.path().join("grid.toml");
    let (code, _, err) = thelma(&[
        "layout",
        "--size",
        "16,14,24",
        "--grid",
        "2,2,2",
        "--ranks",
        "4",
        "--gpus",
        "2",
        grid.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let stdout = run(4, &["--layout", grid.to_str().unwrap()], &dir("grid"));
    assert!(
        stdout.contains(" channels over zero-copy") && stdout.contains(" channels over mpi"),
        "{stdout}"
    );
    assert_same(&outputs(&dir("grid")), &one, "a 2x2x2 grid on 4 ranks");

    // A job's checkpoint at step 20, resumed by one process to step 40.
    run(
        2,
        &["--quiet", "--steps", "20", "--checkpoint-every", "20"],
        &dir("ck"),
    );
    // ... and by four ranks, bit for bit too.
    let resume = |np: usize, out: &Path| {
        let (ck, out) = (dir("ck"), out.to_str().unwrap().to_string());
        let args = [
            "run",
            "--resume",
            ck.to_str().unwrap(),
            "--steps",
            "40",
            "--quiet",
            "-o",
            &out,
        ];
        let (code, _, err) = if np == 1 {
            thelma(&args)
        } else {
            mpirun(np, &args)
        };
        assert_eq!(code, 0, "resumed on {np} rank(s): {err}");
    };
    let resumed = dir("resumed");
    resume(1, &resumed);
    resume(4, &dir("resumed4"));
    let last = |files: Vec<(String, Vec<u8>)>| {
        files
            .into_iter()
            .filter(|(n, _)| n.ends_with(".vti"))
            .max()
            .expect("a .vti file")
    };
    let one_last = last(one);
    assert!(
        last(outputs(&resumed)) == one_last,
        "a job's checkpoint resumed in one process differs from one process's run"
    );
    assert!(
        last(outputs(&dir("resumed4"))) == one_last,
        "a 2-rank checkpoint resumed on 4 ranks differs from one process's run"
    );
}

/// The process of rank `rank` among the children of `parent` (from their environments).
fn rank_pid(parent: u32, rank: usize) -> Option<u32> {
    let want = format!("OMPI_COMM_WORLD_RANK={rank}");
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The parent's pid is the 4th field, after the command in parentheses.
        let ppid: u32 = stat
            .rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let has = env.split(|&b| b == 0).any(|v| v == want.as_bytes());
        (ppid == parent && has).then_some(pid)
    })
}

#[test]
fn a_rank_killed_mid_run_ends_every_rank_within_seconds() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let mut args: Vec<String> = CASE.iter().map(|s| s.to_string()).collect();
    args.extend(["--re", "50", "--steps", "1000000", "--quiet", "-o"].map(String::from));
    args.push(out.to_str().unwrap().into());
    let mut child = mpirun_command(3, &args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mpirun runs");
    // Rank 1, once the job runs.
    let start = std::time::Instant::now();
    let victim = loop {
        if let Some(p) = rank_pid(child.id(), 1) {
            break p;
        }
        assert!(start.elapsed().as_secs() < 60, "rank 1 never started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(child.try_wait().unwrap().is_none(), "the job ended early");
    let killed = std::time::Instant::now();
    unsafe { libc::kill(victim as i32, libc::SIGKILL) };
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            killed.elapsed().as_secs() < 20,
            "the job still runs 20 s after rank 1 was killed"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(!status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("rank 1"), "{err}");
}

#[test]
fn a_bad_layout_ends_every_rank_with_one_line_and_status_2() {
    let tmp = tempfile::tempdir().unwrap();
    let layout = tmp.path().join("layout.toml");
    let (code, _, err) = thelma(&[
        "layout",
        "--size",
        "16,14,24",
        "--ranks",
        "3",
        layout.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let out = tmp.path().join("out");
    let mut args: Vec<&str> = CASE.to_vec();
    args.extend_from_slice(&[
        "--layout",
        layout.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let (code, _, err) = mpirun(2, &args);
    assert_eq!(code, 2, "{err}");
    // One line, rank 0's: rank 1 refuses the same input and leaves the word to rank 0.
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(
        lines,
        ["error: --layout: the layout names 3 rank(s), and 2 process(es) run (mpirun -np 3)"],
        "{err}"
    );
    assert!(!out.exists(), "a refused job wrote {}", out.display());
}

/// On a GPU host: 2 and 4 ranks, every one on GPU 0, write what one process writes, byte for byte
/// (the interfaces in zero-copy outboxes and MPI messages, the slabs in the CUDA module).
#[test]
#[ignore = "needs a CUDA device"]
fn ranks_sharing_a_gpu_write_what_one_process_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let args = |out: &Path| {
        [
            "run",
            "--backend",
            "cuda",
            "--size",
            "48,40,60",
            "--steps",
            "100",
            "--collision",
            "mrt",
            "--quiet",
            "-o",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain([out.to_string_lossy().into_owned()])
        .collect::<Vec<String>>()
    };
    let one = tmp.path().join("one");
    let a = args(&one);
    let (code, _, err) = thelma(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "one process: {err}");
    let want = outputs(&one);
    assert!(want.iter().any(|(n, _)| n.ends_with(".vti")), "{want:?}");
    for np in [2, 4] {
        let dir = tmp.path().join(format!("np{np}"));
        let a = args(&dir);
        let (code, _, err) = mpirun(np, &a.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(code, 0, "{np} ranks: {err}");
        assert_same(&outputs(&dir), &want, &format!("{np} ranks on GPU 0"));
    }
}

#[test]
fn comm_bench_measures_the_mpi_transport_one_rank_per_device() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("comm.json");
    let bench = |extra: &[&str]| {
        let mut args = vec![
            "comm-bench",
            "--backend",
            "cpu",
            "--edge",
            "16",
            "--iterations",
            "200",
            "--warmup",
            "5",
        ];
        args.extend_from_slice(extra);
        mpirun(3, &args)
    };
    let (code, out, err) = bench(&["--topology", "circular", "--json", json.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // Rank 0 alone speaks.
    assert_eq!(out.matches("comm-bench:").count(), 1, "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{v}");
    let r = &runs[0];
    assert_eq!(r["transport"], "mpi");
    // Every word of the ring's three links arrived (a stale or lost one fails the run), each
    // position on its own rank.
    assert_eq!(r["links"].as_array().unwrap().len(), 3, "{r}");
    for (k, d) in r["per_device"].as_array().unwrap().iter().enumerate() {
        assert!(
            d["describe"]
                .as_str()
                .unwrap()
                .contains(&format!("rank {k} of 3")),
            "{d}"
        );
    }
    assert!(r["aggregate_gbs"].as_f64().unwrap() > 0.0);

    // Only the MPI transport runs in a job: one line from rank 0, status 2.
    let (code, _, err) = bench(&["--transport", "zero-copy"]);
    assert_eq!(code, 2, "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("--transport"), "{err}");
}

/// A viewer of a live job over the socket, reading with a timeout so that a job that stops talking
/// fails the test instead of hanging it.
struct Viewer(tungstenite::WebSocket<std::net::TcpStream>);

impl Viewer {
    fn connect(page: &str) -> Viewer {
        let addr = page
            .strip_prefix("http://")
            .and_then(|r| r.split('/').next())
            .unwrap();
        let stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        let (ws, _) = tungstenite::client(format!("ws://{addr}/ws"), stream).unwrap();
        Viewer(ws)
    }

    fn send(&mut self, v: serde_json::Value) {
        self.0
            .send(tungstenite::Message::text(v.to_string()))
            .unwrap();
    }

    /// The next message of type `kind` for which `pick` holds.
    fn next(&mut self, kind: &str, pick: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        loop {
            let m = self
                .0
                .read()
                .unwrap_or_else(|e| panic!("waiting for {kind}: {e}"));
            if let tungstenite::Message::Text(t) = m {
                let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                if v["type"] == kind && pick(&v) {
                    return v;
                }
            }
        }
    }
}

/// A job of two ranks served live from rank 0: pictures of planes held by rank 1's slab, a lid
/// slowed on every rank from one step boundary (a checkpoint taken there resumes in one process to
/// the job's populations bit for bit), all logged in rank 0's summary.
#[test]
fn a_cluster_job_is_served_live_from_rank_0() {
    use serde_json::json;
    use std::io::{BufRead, BufReader};
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("live"), tmp.path().join("resumed"));
    let mut args: Vec<&str> = CASE.to_vec();
    args.extend([
        "--steps",
        "1000",
        "--checkpoint-every",
        "1000",
        "--live",
        "127.0.0.1:0",
        "--live-every",
        "5",
        "--live-ms",
        "10",
        "-o",
        a.to_str().unwrap(),
    ]);
    let mut job = mpirun_command(2, &args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(job.stdout.take().unwrap()).lines();
    let page = loop {
        let line = lines.next().expect("a line naming the page").unwrap();
        if let Some(u) = line.strip_prefix("live view: ") {
            break u.to_string();
        }
    };
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let mut v = Viewer::connect(&page);
    assert_eq!(v.next("hello", |_| true)["size"], json!([16, 14, 24]));
    v.send(json!({"cmd": "pause"}));
    let at = v.next("ack", |_| true)["step"].as_u64().unwrap();
    // The plane under the lid, which moves from the first step on, lies in rank 1's slab (an even
    // split: z 12–23).
    v.send(json!({"cmd": "view", "field": "ux", "axis": "z", "index": 23}));
    let view = v.next("ack", |_| true);
    assert_eq!(
        (view["cmd"].as_str(), view["step"].as_u64()),
        (Some("view"), Some(at))
    );
    let frame = v.next("frame", |f| f["axis"] == "z");
    assert_eq!(
        (
            frame["width"].as_u64(),
            frame["height"].as_u64(),
            frame["step"].as_u64()
        ),
        (Some(16), Some(14), Some(at))
    );
    assert!(frame["max"].as_f64().unwrap() > 0.0, "{frame}");
    v.send(json!({"cmd": "wall", "slot": 0, "speed": 0.05}));
    v.send(json!({"cmd": "checkpoint"}));
    v.send(json!({"cmd": "resume"}));
    let acks: Vec<serde_json::Value> = (0..3).map(|_| v.next("ack", |_| true)).collect();
    let cmds: Vec<&str> = acks.iter().map(|a| a["cmd"].as_str().unwrap()).collect();
    assert_eq!(cmds, ["wall", "checkpoint", "resume"]);
    assert!(
        acks.iter().all(|a| a["step"].as_u64() == Some(at)),
        "{acks:?}"
    );
    std::fs::create_dir_all(&b).unwrap();
    // The checkpoint was written before its acknowledgement.
    std::fs::copy(a.join("checkpoint.thelma"), b.join("checkpoint.thelma")).unwrap();
    assert_eq!(v.next("end", |_| true)["step"], 1000);
    let status = job.wait().unwrap();
    let out = rest.join().unwrap().join("\n");
    assert!(status.success(), "{out}");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("summary.json")).unwrap()).unwrap();
    let actions: Vec<&str> = s["steering"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["pause", "view", "wall", "checkpoint", "resume"]);
    let (code, o, e) = thelma(&["run", "--resume", b.to_str().unwrap(), "--quiet"]);
    assert_eq!(code, 0, "{o}{e}");
    let got = thelma_cli::checkpoint::load(&b).unwrap();
    let want = thelma_cli::checkpoint::load(&a).unwrap();
    assert_eq!((got.header.step, want.header.step), (1000, 1000));
    assert!(
        got.populations == want.populations,
        "the job's lid change did not reach every rank alike"
    );
    assert_eq!(got.header.walls, Some(vec![[0.05, 0.0, 0.0]]));
}
