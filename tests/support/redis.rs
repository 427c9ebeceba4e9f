//! A real `redis-server` for the rate store's tests, started by the test
//! on a free loopback port of its own, with no persistence.
//!
//! Without `redis-server` on the PATH the tests say they were skipped and
//! why, unless `PORTCULLIS_REQUIRE_REDIS` is set (`.ci/run` sets it, after
//! installing the server): then a missing server fails them.

#![allow(dead_code)] // each test file uses its own part

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether `redis-server` is installed; if not, says that `test` was
/// skipped, or fails it when `PORTCULLIS_REQUIRE_REDIS` is set.
fn installed(test: &str) -> bool {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok();
    if !found {
        let required = std::env::var_os("PORTCULLIS_REQUIRE_REDIS").is_some();
        assert!(
            !required,
            "{test}: redis-server is not installed, and PORTCULLIS_REQUIRE_REDIS is set"
        );
        eprintln!(
            "SKIPPED {test}: redis-server is not installed (apt-get install redis-server; \
             .ci/run installs it and requires these tests)"
        );
    }
    found
}

/// Runs `command` (a `redis-server` with its own arguments) on loopback
/// port `port` with no persistence, and waits until it answers.
fn spawn(port: u16, mut command: Command) -> Child {
    let child = command
        .args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Kills a server's process, if it runs (as a crash would).
fn stop(child: &mut Option<Child>) {
    if let Some(mut child) = child.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A `redis-server` process; killed when dropped.
pub(crate) struct RedisServer {
    child: Option<Child>,
    port: u16,
}

impl RedisServer {
    /// Starts a server, or `None` (after saying why) when `redis-server`
    /// is not installed and the tests are not required to run.
    pub(crate) fn start(test: &str) -> Option<Self> {
        if !installed(test) {
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let mut server = Self { child: None, port };
        server.restart();
        Some(server)
    }

    /// `redis://127.0.0.1:port/`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts the server (again) on the same port, empty, and waits until
    /// it answers.
    pub(crate) fn restart(&mut self) {
        self.kill();
        self.child = Some(spawn(self.port, Command::new("redis-server")));
    }

    /// Kills the server (as a crash would).
    pub(crate) fn kill(&mut self) {
        stop(&mut self.child);
    }

    /// Stops (`true`) or resumes the server's process: a server that
    /// accepts connections and answers nothing.
    pub(crate) fn freeze(&self, frozen: bool) {
        let child = self.child.as_ref().expect("running");
        let signal = if frozen { "-STOP" } else { "-CONT" };
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    /// Runs a command on the server with redis-cli-free plain RESP, for
    /// looking at what a store wrote: the reply's text.
    pub(crate) fn command(&self, args: &[&str]) -> String {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        stream.write_all(request.as_bytes()).unwrap();
        let mut reply = vec![0; 4096];
        let n = stream.read(&mut reply).unwrap();
        String::from_utf8_lossy(&reply[..n]).into_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A frozen server does not die of SIGKILL's absence of a
            // handler, but resume it anyway so nothing lingers stopped.
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
        }
        self.kill();
    }
}

/// A Redis Cluster of three masters (no replicas) on loopback ports of its
/// own, in a temporary directory; killed when dropped.
pub(crate) struct RedisCluster {
    nodes: Vec<ClusterNode>,
    _dir: tempfile::TempDir,
}

struct ClusterNode {
    child: Option<Child>,
    port: u16,
    dir: std::path::PathBuf,
}

impl ClusterNode {
    fn start(&mut self) {
        let mut command = Command::new("redis-server");
        command
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            .args(["--cluster-node-timeout", "2000"])
            .current_dir(&self.dir);
        self.child = Some(spawn(self.port, command));
    }

    fn kill(&mut self) {
        stop(&mut self.child);
    }
}

impl RedisCluster {
    /// Starts three nodes and joins them into a cluster that covers every
    /// slot, or `None` as [`RedisServer::start`] says.
    pub(crate) fn start(test: &str) -> Option<Self> {
        if !installed(test) {
            return None;
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut nodes = Vec::new();
        for i in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free port")
                .port();
            let node_dir = dir.path().join(format!("node-{i}"));
            std::fs::create_dir(&node_dir).unwrap();
            let mut node = ClusterNode {
                child: None,
                port,
                dir: node_dir,
            };
            node.start();
            nodes.push(node);
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .status()
            .expect("redis-cli runs (package redis-tools)");
        assert!(created.success(), "redis-cli --cluster create failed");
        let cluster = Self { nodes, _dir: dir };
        cluster.wait_until_ok();
        Some(cluster)
    }

    /// `redis://127.0.0.1:port/` of each node.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect()
    }

    /// Runs a command on the cluster through `redis-cli -c`, which follows
    /// the key's slot to its node: the reply as redis-cli prints it.
    pub(crate) fn command(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-c", "-p", &self.nodes[0].port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs (package redis-tools)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Kills node `i` (as a crash would).
    pub(crate) fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts node `i` again with its cluster config, and waits until the
    /// cluster covers every slot again.
    pub(crate) fn restart(&mut self, i: usize) {
        self.nodes[i].start();
        self.wait_until_ok();
    }

    /// Waits until every node says `cluster_state:ok`.
    fn wait_until_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = self.nodes.iter().all(|node| {
                Command::new("redis-cli")
                    .args(["-p", &node.port.to_string(), "cluster", "info"])
                    .output()
                    .is_ok_and(|out| {
                        String::from_utf8_lossy(&out.stdout).contains("cluster_state:ok")
                    })
            });
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster did not become ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
    }
}
