//! A real ZooKeeper (Debian's libzookeeper-java) for the lb-watcher tests: a standalone server
//! or a three-member ensemble on loopback ports picked free, each with a temporary data
//! directory, that can be stopped, killed and restarted on the same port and data.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::{free_port, wait_until_blocking};

const CLASSPATH: &str = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";
/// A JVM starting on a busy machine: generous.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Ticks of 200 ms: sessions may be as short as 400 ms, elections are quick.
const TICK_MS: u32 = 200;

/// One ZooKeeper server process (standalone, or a member of a [`ZkEnsemble`]).
#[derive(Debug)]
pub struct ZkServer {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
    /// Kept alive while the server exists (the data directory lives in it).
    _tmp: Option<tempfile::TempDir>,
}

/// Sends a four-letter command (`mntr`, `srvr`, `ruok`) to `port` and returns the answer.
pub fn four_letter(port: u16, command: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(command.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

impl ZkServer {
    /// A standalone server; panics if it does not serve within 30 s.
    pub fn start() -> ZkServer {
        let tmp = tempfile::Builder::new().prefix("zk-test-").tempdir().expect("a temporary directory");
        let dir = tmp.path().to_path_buf();
        let port = free_port();
        write_config(&dir, port, &[]);
        let mut server = ZkServer { child: None, dir, port, _tmp: Some(tmp) };
        server.spawn();
        server.wait_serving();
        server
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("zookeeper.log"))
            .expect("the ZooKeeper log file");
        let child = Command::new("java")
            .args(["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true"])
            .arg("-cp")
            .arg(CLASSPATH)
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(self.dir.join("zoo.cfg"))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map(Stdio::from).unwrap_or_else(|_| Stdio::null()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting java (is libzookeeper-java installed? scripts/install-deps test)");
        self.child = Some(child);
    }

    /// Waits until `mntr` answers with statistics (`ruok` says imok a bit earlier).
    fn wait_serving(&self) {
        let port = self.port;
        let ok = wait_until_blocking(START_TIMEOUT, || {
            four_letter(port, "mntr").is_some_and(|a| a.contains("zk_server_state"))
        });
        assert!(ok, "ZooKeeper on port {port} did not serve within {START_TIMEOUT:?}; log:\n{}", self.log());
    }

    /// Whether `mntr` answers now.
    pub fn is_serving(&self) -> bool {
        four_letter(self.port, "mntr").is_some_and(|a| a.contains("zk_server_state"))
    }

    /// `Mode:` from `srvr`: `standalone`, `leader`, `follower`, or `None` when not serving.
    pub fn mode(&self) -> Option<String> {
        let answer = four_letter(self.port, "srvr")?;
        answer.lines().find_map(|l| l.strip_prefix("Mode: ").map(|m| m.trim().to_owned()))
    }

    /// The server's own log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("zookeeper.log")).unwrap_or_default()
    }

    /// SIGTERM, then SIGKILL after 5 s; waits for the exit.
    pub fn stop(&mut self) {
        self.signal_and_reap(Signal::SIGTERM);
    }

    /// SIGKILL: the server dies at once, as in a crash.
    pub fn kill(&mut self) {
        self.signal_and_reap(Signal::SIGKILL);
    }

    fn signal_and_reap(&mut self, signal: Signal) {
        let Some(mut child) = self.child.take() else { return };
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
        if !wait_until_blocking(Duration::from_secs(5), || child.try_wait().ok().flatten().is_some()) {
            let _ = child.kill();
        }
        let _ = child.wait();
    }

    /// Starts the server again on the same port and data directory; waits until it serves
    /// (for an ensemble member: until it has rejoined, see [`ZkEnsemble::restart`]).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
        self.wait_serving();
    }

    fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- ZooKeeper on port {} log (last 40 lines):", self.port);
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            for line in &lines[lines.len().saturating_sub(40)..] {
                eprintln!("{line}");
            }
        }
        self.kill();
    }
}

/// Three ZooKeeper servers in one ensemble, quorum and election ports on loopback.
#[derive(Debug)]
pub struct ZkEnsemble {
    pub servers: Vec<ZkServer>,
    _tmp: tempfile::TempDir,
}

impl ZkEnsemble {
    /// Starts `n` members and waits until they have elected a leader and all serve.
    pub fn start(n: usize) -> ZkEnsemble {
        let tmp = tempfile::Builder::new().prefix("zk-ensemble-").tempdir().expect("a temporary directory");
        let members: Vec<(u16, u16, u16)> = (0..n).map(|_| (free_port(), free_port(), free_port())).collect();
        let mut servers = Vec::new();
        for (i, (client, _, _)) in members.iter().enumerate() {
            let dir = tmp.path().join(format!("zk{}", i + 1));
            std::fs::create_dir_all(&dir).expect("a member directory");
            std::fs::write(dir.join("myid"), format!("{}\n", i + 1)).expect("myid");
            write_config(&dir, *client, &members);
            servers.push(ZkServer { child: None, dir, port: *client, _tmp: None });
        }
        for server in &mut servers {
            server.spawn();
        }
        let ensemble = ZkEnsemble { servers, _tmp: tmp };
        let ok = wait_until_blocking(START_TIMEOUT, || ensemble.servers.iter().all(ZkServer::is_serving));
        assert!(ok, "the ensemble did not form within {START_TIMEOUT:?}; logs:\n{}", ensemble.logs());
        ensemble
    }

    /// Every member's `127.0.0.1:PORT`, comma-separated.
    pub fn connect_string(&self) -> String {
        self.servers.iter().map(ZkServer::connect_string).collect::<Vec<_>>().join(",")
    }

    /// The index of the member whose `srvr` says `Mode: leader`.
    pub fn leader(&self) -> Option<usize> {
        self.servers.iter().position(|s| s.mode().as_deref() == Some("leader"))
    }

    /// Waits until the members still running have a leader again.
    pub fn wait_leader(&self, within: Duration) -> Option<usize> {
        let mut leader = None;
        wait_until_blocking(within, || {
            leader = self.leader();
            leader.is_some()
        });
        leader
    }

    /// Restarts member `i` and waits until it serves again.
    pub fn restart(&mut self, i: usize) {
        self.servers[i].restart();
    }

    /// SIGKILL to every member: the whole ensemble gone at once.
    pub fn kill_all(&mut self) {
        for server in &mut self.servers {
            server.kill();
        }
    }

    /// Starts every member that is not running, on its port and data, and waits until they have
    /// elected a leader and all serve. One member alone cannot serve without a quorum, which is
    /// why [`ZkEnsemble::restart`] does not do for a whole-ensemble outage.
    pub fn start_all(&mut self) {
        for server in &mut self.servers {
            if server.child.is_none() {
                server.spawn();
            }
        }
        let ok = wait_until_blocking(START_TIMEOUT, || self.servers.iter().all(ZkServer::is_serving));
        assert!(ok, "the ensemble did not form again within {START_TIMEOUT:?}; logs:\n{}", self.logs());
    }

    fn logs(&self) -> String {
        self.servers.iter().map(|s| format!("-- {}:\n{}", s.dir().display(), s.log())).collect()
    }
}

fn write_config(dir: &Path, client_port: u16, members: &[(u16, u16, u16)]) {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("the data directory");
    if let Ok(myid) = std::fs::read_to_string(dir.join("myid")) {
        std::fs::write(data.join("myid"), myid).expect("myid in the data directory");
    }
    let mut cfg = format!(
        "tickTime={TICK_MS}\ninitLimit=20\nsyncLimit=10\ndataDir={}\nclientPort={client_port}\n\
         clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,mntr\n\
         maxSessionTimeout=60000\n",
        data.display()
    );
    for (i, (_, quorum, election)) in members.iter().enumerate() {
        cfg.push_str(&format!("server.{}=127.0.0.1:{quorum}:{election}\n", i + 1));
    }
    std::fs::write(dir.join("zoo.cfg"), cfg).expect("zoo.cfg");
}

/// A ZooKeeper client session for a test: registers servers as ephemeral nodes the way API
/// servers do (registrar JSON), or writes any data. Dropping it closes the session, which
/// removes its ephemeral nodes.
#[derive(Debug)]
pub struct ZkClient {
    pub client: zookeeper_client::Client,
}

impl ZkClient {
    /// Connects with a 10 s session; panics when it cannot within 20 s.
    pub async fn connect(connect_string: &str) -> ZkClient {
        ZkClient::connect_with(connect_string, Duration::from_secs(10)).await
    }

    /// Connects with a session of `session_timeout` (ZooKeeper bounds it: 400 ms to 60 s
    /// here); panics when it cannot within 20 s.
    pub async fn connect_with(connect_string: &str, session_timeout: Duration) -> ZkClient {
        let connecting =
            zookeeper_client::Client::connector().with_session_timeout(session_timeout).connect(connect_string);
        let client = tokio::time::timeout(Duration::from_secs(20), connecting)
            .await
            .unwrap_or_else(|_| panic!("connecting to ZooKeeper {connect_string} timed out"))
            .unwrap_or_else(|e| panic!("connecting to ZooKeeper {connect_string}: {e}"));
        ZkClient { client }
    }

    /// Creates `path` and its parents (persistent), if missing.
    pub async fn mkdir(&self, path: &str) {
        let options = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
        match self.client.mkdir(path, &options).await {
            Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => panic!("mkdir {path}: {e}"),
        }
    }

    /// An ephemeral node `path` holding `data`.
    pub async fn create(&self, path: &str, data: &[u8]) {
        let options = zookeeper_client::CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all());
        if let Err(e) = self.client.create(path, data, &options).await {
            panic!("create {path}: {e}");
        }
    }

    /// Registers `name` under `dir` as a registrar `host` record for `ip`.
    pub async fn register(&self, dir: &str, name: &str, ip: &str) {
        let data = format!(r#"{{"type":"host","address":"{ip}","ttl":60,"host":{{"address":"{ip}"}}}}"#);
        self.create(&format!("{dir}/{name}"), data.as_bytes()).await;
    }

    /// Registers `name` under `dir` as a registrar `load_balancer` record for `addr`'s port.
    pub async fn register_port(&self, dir: &str, name: &str, addr: std::net::SocketAddr) {
        self.create(&format!("{dir}/{name}"), load_balancer_record(addr).as_bytes()).await;
    }

    /// Rewrites registered `name`'s record in place for `addr` (a registrar whose server came
    /// back on another address or port).
    pub async fn move_port(&self, dir: &str, name: &str, addr: std::net::SocketAddr) {
        let path = format!("{dir}/{name}");
        if let Err(e) = self.client.set_data(&path, load_balancer_record(addr).as_bytes(), None).await {
            panic!("set_data {path}: {e}");
        }
    }

    /// Ephemeral nodes `dir/NAME` holding `DATA`, for every `(NAME, DATA)`: multi-writes of 500
    /// creates each, one round trip per batch (thousands of nodes in seconds, not minutes).
    pub async fn create_many(&self, dir: &str, nodes: &[(String, Vec<u8>)]) {
        let options = zookeeper_client::CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all());
        for batch in nodes.chunks(500) {
            let mut writer = self.client.new_multi_writer();
            for (name, data) in batch {
                let path = format!("{dir}/{name}");
                writer.add_create(&path, data, &options).unwrap_or_else(|e| panic!("create {path}: {e}"));
            }
            if let Err(e) = writer.commit().await {
                panic!("creating {} nodes under {dir}: {e}", batch.len());
            }
        }
    }

    pub async fn delete(&self, path: &str) {
        if let Err(e) = self.client.delete(path, None).await {
            panic!("delete {path}: {e}");
        }
    }
}

/// A registrar `load_balancer` record for `addr`'s address and port.
fn load_balancer_record(addr: std::net::SocketAddr) -> String {
    let (ip, port) = (addr.ip(), addr.port());
    format!(r#"{{"type":"load_balancer","address":"{ip}","load_balancer":{{"address":"{ip}","ports":[{port}]}}}}"#)
}
