//! A broker of the test's own behind a TCP proxy that can hold back a process's produce requests,
//! to put records "in flight" for as long as a test decides.
//!
//! [`ProxiedBroker::start`] runs an Apache Kafka node of the test's own (`scripts/kafka-broker.sh`)
//! that advertises the proxy's port, so every client, the filter's
//! included, talks to it through [`Proxy`]. The proxy reads the client-to-broker byte stream as
//! Kafka request frames (`size: i32` then `api_key: i16`, ...): a connection that has carried a
//! Produce request (api key 0) is a producer's. [`Proxy::hold_producers`] stops forwarding what
//! those connections send from then on and keeps it; [`Proxy::release`] delivers it, in order,
//! on the same broker connection. A process killed meanwhile thus has produce requests that
//! reach the broker after its death, at a moment of the test's choosing: what a slow network or
//! a busy broker does to a real SIGKILLed producer, made deterministic.
//! [`Proxy::hold_from_api`] holds instead every connection from its first request of one API
//! (e.g. InitProducerId, api key 22): a broker that answers metadata but not that request.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{free_port, Broker};

/// One client connection through the proxy.
struct Conn {
    /// Set once the client sent a Produce request on it.
    producer: AtomicBool,
    /// Writes to the broker, and what is held back for it.
    to_broker: Mutex<Forward>,
}

/// The broker-bound half of a connection.
struct Forward {
    /// The broker connection.
    stream: TcpStream,
    /// `Some` while held: the frames kept back, in order.
    held: Option<Vec<u8>>,
    /// The client closed its side: once nothing is held, the broker side is closed too.
    client_closed: bool,
}

impl Forward {
    fn close_if_done(&mut self) {
        if self.client_closed && self.held.is_none() {
            let _ = self.stream.shutdown(Shutdown::Write);
        }
    }
}

/// A TCP proxy to one broker that can hold back producers' requests (see the module doc).
pub struct Proxy {
    /// The port clients connect to.
    pub port: u16,
    /// Every connection accepted so far.
    conns: Arc<Mutex<Vec<Arc<Conn>>>>,
    /// Produce requests held back since the last release.
    held_produce: Arc<AtomicU64>,
    /// The api key [`Self::hold_from_api`] holds from, or -1.
    hold_api: Arc<AtomicI32>,
    /// Requests of that api held back since the last release.
    held_api: Arc<AtomicU64>,
    /// Set by [`Self::shut`]: the listener is closed at the next connection.
    shut: Arc<AtomicBool>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards each connection to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy listens");
        let port = listener.local_addr().unwrap().port();
        let conns: Arc<Mutex<Vec<Arc<Conn>>>> = Arc::default();
        let held_produce = Arc::new(AtomicU64::new(0));
        let (hold_api, held_api) = (Arc::new(AtomicI32::new(-1)), Arc::new(AtomicU64::new(0)));
        let (list, held) = (conns.clone(), held_produce.clone());
        let (api, api_held) = (hold_api.clone(), held_api.clone());
        let shut = Arc::new(AtomicBool::new(false));
        let closing = shut.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if closing.load(Ordering::SeqCst) {
                    break; // the listener is dropped: connections are refused from now on
                }
                let Ok(broker) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = broker.set_nodelay(true);
                let conn = Arc::new(Conn {
                    producer: AtomicBool::new(false),
                    to_broker: Mutex::new(Forward {
                        stream: broker.try_clone().unwrap(),
                        held: None,
                        client_closed: false,
                    }),
                });
                list.lock().unwrap().push(conn.clone());
                let client_reader = client.try_clone().unwrap();
                let held = held.clone();
                let api = (api.clone(), api_held.clone());
                std::thread::spawn(move || client_to_broker(client_reader, &conn, &held, &api));
                std::thread::spawn(move || broker_to_client(broker, client));
            }
        });
        Proxy {
            port,
            conns,
            held_produce,
            hold_api,
            held_api,
            shut,
        }
    }

    /// The broker as gone as a stopped one looks to its clients: every connection is closed and
    /// new ones are refused (the listener closed), for good.
    pub fn shut(&self) {
        self.shut.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wakes the accept loop
        for c in self.conns.lock().unwrap().iter() {
            let _ = c.to_broker.lock().unwrap().stream.shutdown(Shutdown::Both);
        }
    }

    /// From now on, keeps back everything a connection sends from its first request of api
    /// `key` (Kafka's api key: 22 is InitProducerId), that request included, on every connection,
    /// those opened later too, until [`Self::release`].
    pub fn hold_from_api(&self, key: i16) {
        self.hold_api.store(i32::from(key), Ordering::SeqCst);
    }

    /// Requests of the api given to [`Self::hold_from_api`] kept back since it was called.
    pub fn held_api_requests(&self) -> u64 {
        self.held_api.load(Ordering::SeqCst)
    }

    /// From now on, keeps back everything sent on the connections that have carried a Produce
    /// request so far (connections opened later pass freely). Returns how many were held.
    pub fn hold_producers(&self) -> usize {
        let conns = self.conns.lock().unwrap();
        let mut n = 0;
        for c in conns.iter().filter(|c| c.producer.load(Ordering::SeqCst)) {
            let mut f = c.to_broker.lock().unwrap();
            if !f.client_closed && f.held.is_none() {
                f.held = Some(Vec::new());
                n += 1;
            }
        }
        n
    }

    /// Produce requests kept back since [`Self::hold_producers`].
    pub fn held_produce_requests(&self) -> u64 {
        self.held_produce.load(Ordering::SeqCst)
    }

    /// Delivers everything held, in order, and stops holding.
    pub fn release(&self) {
        self.hold_api.store(-1, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().iter() {
            let mut f = c.to_broker.lock().unwrap();
            if let Some(bytes) = f.held.take() {
                let _ = f.stream.write_all(&bytes);
                f.close_if_done();
            }
        }
        self.held_produce.store(0, Ordering::SeqCst);
        self.held_api.store(0, Ordering::SeqCst);
    }
}

/// Copies request frames from the client to the broker, or into the hold.
fn client_to_broker(
    mut client: TcpStream,
    conn: &Conn,
    held_produce: &AtomicU64,
    api: &(Arc<AtomicI32>, Arc<AtomicU64>),
) {
    let mut size = [0u8; 4];
    loop {
        if client.read_exact(&mut size).is_err() {
            break;
        }
        let len = i32::from_be_bytes(size).max(0) as usize;
        let mut frame = vec![0u8; 4 + len];
        frame[..4].copy_from_slice(&size);
        if client.read_exact(&mut frame[4..]).is_err() {
            break;
        }
        let produce = len >= 2 && i16::from_be_bytes([frame[4], frame[5]]) == 0;
        if produce {
            conn.producer.store(true, Ordering::SeqCst);
        }
        let mut f = conn.to_broker.lock().unwrap();
        let key = if len >= 2 {
            i32::from(i16::from_be_bytes([frame[4], frame[5]]))
        } else {
            -2
        };
        let hold_from = api.0.load(Ordering::SeqCst);
        if hold_from >= 0 && key == hold_from {
            if f.held.is_none() {
                f.held = Some(Vec::new());
            }
            api.1.fetch_add(1, Ordering::SeqCst);
        }
        match f.held.as_mut() {
            Some(held) => {
                held.extend_from_slice(&frame);
                if produce {
                    held_produce.fetch_add(1, Ordering::SeqCst);
                }
            }
            None => {
                if f.stream.write_all(&frame).is_err() {
                    break;
                }
            }
        }
    }
    let mut f = conn.to_broker.lock().unwrap();
    f.client_closed = true;
    f.close_if_done();
}

/// Copies responses to the client; once the client is gone, keeps reading (and dropping) them
/// so held requests released later are still answered by the broker.
fn broker_to_client(mut broker: TcpStream, mut client: TcpStream) {
    let mut buf = [0u8; 64 * 1024];
    let mut client_alive = true;
    loop {
        match broker.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if client_alive && client.write_all(&buf[..n]).is_err() {
                    client_alive = false;
                }
            }
        }
    }
    let _ = client.shutdown(Shutdown::Both);
}

/// An Apache Kafka node of this test's own (its data in a temporary directory) that advertises a
/// [`Proxy`] in front of it.
pub struct ProxiedBroker {
    /// The broker process.
    child: Child,
    /// Its working directory (configuration, data, logs).
    dir: tempfile::TempDir,
    /// The proxy every client goes through.
    pub proxy: Proxy,
}

impl ProxiedBroker {
    /// Starts an Apache Kafka node of the test's own (`scripts/kafka-broker.sh`, with the jars
    /// `scripts/test.sh` installed: `KAFKA_LIBS`) on a free port, advertising a new proxy's port,
    /// and waits until it logs "Kafka Server started" (up to 3 minutes) and answers metadata.
    /// The port is free when chosen, not when the JVM binds it seconds later: another test's
    /// client may take it meanwhile (both come from the ephemeral range). A broker that exits
    /// with "Address already in use" is started again on other ports, up to three times.
    pub fn start() -> ProxiedBroker {
        std::env::var("KAFKA_LIBS")
            .expect("KAFKA_LIBS is not set: run the tests through scripts/test.sh, which installs Apache Kafka");
        for _ in 0..2 {
            match Self::try_start() {
                Ok(broker) => return broker,
                Err(logs) => eprintln!("the broker's port was taken before it bound it; starting again:\n{logs}"),
            }
        }
        Self::try_start().unwrap_or_else(|logs| panic!("the broker exited (its port taken, three times):\n{logs}"))
    }

    /// One start of [`Self::start`]: `Err(its log)` when the broker exited because a port it was
    /// given was taken; any other failure panics.
    fn try_start() -> Result<ProxiedBroker, String> {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let proxy = Proxy::start(port);
        let log = std::fs::File::create(dir.path().join("stdout.log")).unwrap();
        let child = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/kafka-broker.sh"))
            .arg(dir.path())
            .arg(port.to_string())
            .arg(proxy.port.to_string())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start scripts/kafka-broker.sh");
        let mut broker = ProxiedBroker { child, dir, proxy };
        let deadline = Instant::now() + Duration::from_secs(180);
        while !broker.logs().contains("Kafka Server started") {
            if let Ok(Some(status)) = broker.child.try_wait() {
                let logs = broker.logs();
                if logs.contains("Address already in use") {
                    return Err(logs);
                }
                panic!("the broker exited ({status}):\n{logs}");
            }
            assert!(
                Instant::now() < deadline,
                "the broker did not start:\n{}",
                broker.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let consumer: rdkafka::consumer::BaseConsumer = broker.broker().client().create().unwrap();
        while rdkafka::consumer::Consumer::fetch_metadata(&consumer, None, Duration::from_secs(2)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the broker does not answer:\n{}",
                broker.logs()
            );
        }
        Ok(broker)
    }

    /// The broker as clients see it (through the proxy).
    pub fn broker(&self) -> Broker {
        Broker::at(format!("127.0.0.1:{}", self.proxy.port))
    }

    /// The broker's log so far (its start-up output, then `server.log`).
    pub fn logs(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
        format!("{}{}", read("stdout.log"), read("server.log"))
    }
}

impl Drop for ProxiedBroker {
    /// SIGTERM (the script `exec`s the JVM, so the broker itself gets it), then SIGKILL if it has
    /// not stopped within 20 s.
    fn drop(&mut self) {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child's.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
