//! Noticing a client that leaves while the provider works: sturnus's stand-in for what Pingora's
//! proxy loop does with `read_body_or_idle` while it waits for the upstream.
//!
//! sturnus forwards from `request_filter` (see `forward.rs`), so nothing reads the client's
//! socket between sending the request upstream and relaying the answer. While a forward waits,
//! its client's socket is on a list that one thread ([`watcher`]) looks at every [`PERIOD`],
//! with a peek that consumes nothing (`MSG_PEEK`): end of stream or an error means the client
//! closed (or reset) its connection, and the waiting forward is woken to end; bytes mean it
//! pipelined its next request. Those stay in the socket for the header guard to read once this
//! answer is complete, and the watch ends there, since a close behind them cannot be seen.
//!
//! Over TLS the socket carries encrypted records, so a peek cannot tell a pipelined request
//! from the client's `close_notify`: there the watcher reads the connection's TCP state instead
//! (the client's FIN or reset shows as `CLOSE_WAIT` or `CLOSE`). An HTTP/2 client has no socket
//! of its own to watch (its streams share one connection), so it is not watched.
//!
//! One thread for every watched request, rather than a timer per request: joining and leaving
//! the list is all a request pays (a lock and a slot, no timer and no system call of its own).
//!
//! Why not `read_body_or_idle` itself: it reads the client's next byte out of the socket. With
//! Pingora's pipelining off it then fails the request ("Sent data after end of body"); with it
//! on, the byte is kept inside Pingora for its own parser, out of reach of the header guard
//! (`header_guard.rs`), which reads every request header itself.

use pingora_core::protocols::http::ServerSession;
use pingora_core::protocols::l4::stream::Stream as SocketStream;
use pingora_core::protocols::SocketDigest;
use pingora_core::{Error, ErrorType};
use std::future::Future;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::{Mutex, MutexGuard, Once, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// How often the watched clients' sockets are looked at (a departed client is noticed within
/// this time).
pub const PERIOD: Duration = Duration::from_millis(200);

/// The client's socket, watched for a close while the provider works.
#[derive(Debug, Clone)]
pub struct ClientWatch {
    /// The client's socket; `None` when the downstream has none to watch (HTTP/2).
    fd: Option<Socket>,
}

/// How a client's socket is looked at.
#[derive(Debug, Clone)]
enum Socket {
    /// A plain socket: peeked at.
    Plain(RawFd),
    /// A TLS connection's socket, whose bytes are encrypted records (a peek cannot tell a
    /// pipelined request from a `close_notify`): its TCP state says whether the client closed.
    Tls(Arc<SocketDigest>),
}

/// What a look at the client's socket found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Nothing to read: the client is waiting.
    Waiting,
    /// Bytes of a pipelined next request.
    Bytes,
    /// End of stream or an error: the client is gone.
    Closed,
}

impl ClientWatch {
    /// Watches the client of `downstream`. The socket stays open as long as the session lives,
    /// and the watch is only awaited while the session is borrowed by the forward.
    pub fn new(downstream: &ServerSession) -> Self {
        let Some(stream) = downstream.stream() else {
            return ClientWatch { fd: None };
        };
        let fd = match stream.as_any().downcast_ref::<SocketStream>() {
            Some(plain) => Some(Socket::Plain(plain.as_raw_fd())),
            None => stream.get_socket_digest().map(Socket::Tls),
        };
        ClientWatch { fd }
    }

    /// Completes when the client has closed its connection; pending while it waits (and for
    /// good once it has sent more bytes, or when there is no socket to watch). The socket is
    /// on the watched list from the first poll until the future completes or is dropped.
    pub fn gone(self) -> Gone {
        Gone {
            fd: self.fd,
            slot: None,
        }
    }
}

/// The future of [`ClientWatch::gone`].
#[derive(Debug)]
pub struct Gone {
    /// The socket to watch; `None` once done (or when there is none).
    fd: Option<Socket>,
    /// Its place on the watched list, once it is there.
    slot: Option<Key>,
}

impl Future for Gone {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(fd) = &self.fd else {
            return Poll::Pending;
        };
        let mut list = watched();
        let Some(key) = self.slot else {
            let key = list.insert(fd.clone(), cx.waker());
            self.slot = Some(key);
            drop(list);
            start_watcher();
            return Poll::Pending;
        };
        if list.poll(key, cx.waker()) {
            list.remove(key);
            drop(list);
            self.slot = None;
            self.fd = None;
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl Drop for Gone {
    fn drop(&mut self) {
        if let Some(key) = self.slot.take() {
            watched().remove(key);
        }
    }
}

/// The error a forward ends with when the client left (a downstream error: nobody to answer).
pub fn client_left() -> Box<Error> {
    Error::explain(
        ErrorType::ConnectionClosed,
        "the client closed its connection before the answer was complete",
    )
    .into_down()
}

/// A place on the watched list: its index and the generation it was given out in (a slot
/// reused by a later request has another generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    index: usize,
    generation: u64,
}

/// The sockets of the clients whose forwards are waiting.
#[derive(Default)]
struct Watched {
    slots: Vec<Slot>,
    /// Indexes of the empty slots.
    free: Vec<usize>,
    generation: u64,
}

#[derive(Default)]
struct Slot {
    generation: u64,
    entry: Option<Entry>,
}

struct Entry {
    fd: Socket,
    /// Wakes the forward when its client is gone.
    waker: Waker,
    /// What the watcher last found: `Waiting` while it keeps looking.
    seen: Seen,
}

impl Watched {
    fn insert(&mut self, fd: Socket, waker: &Waker) -> Key {
        self.generation += 1;
        let entry = Entry {
            fd,
            waker: waker.clone(),
            seen: Seen::Waiting,
        };
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.slots.push(Slot::default());
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        slot.generation = self.generation;
        slot.entry = Some(entry);
        Key {
            index,
            generation: self.generation,
        }
    }

    fn entry(&mut self, key: Key) -> Option<&mut Entry> {
        let slot = self.slots.get_mut(key.index)?;
        (slot.generation == key.generation)
            .then_some(slot.entry.as_mut())
            .flatten()
    }

    /// Whether the client of `key` is gone; if not, `waker` is the one to wake.
    fn poll(&mut self, key: Key, waker: &Waker) -> bool {
        let Some(entry) = self.entry(key) else {
            return false;
        };
        if entry.seen == Seen::Closed {
            return true;
        }
        if !entry.waker.will_wake(waker) {
            entry.waker = waker.clone();
        }
        false
    }

    fn remove(&mut self, key: Key) {
        if self.entry(key).is_some() {
            self.slots[key.index].entry = None;
            self.free.push(key.index);
        }
    }

    /// The sockets still to look at, into `out`.
    fn to_look_at(&self, out: &mut Vec<(Key, Socket)>) {
        out.clear();
        for (index, slot) in self.slots.iter().enumerate() {
            if let Some(entry) = &slot.entry {
                if entry.seen == Seen::Waiting {
                    let key = Key {
                        index,
                        generation: slot.generation,
                    };
                    out.push((key, entry.fd.clone()));
                }
            }
        }
    }

    /// Records what a look at the socket of `key` found; the waker to wake when it closed.
    fn seen(&mut self, key: Key, seen: Seen) -> Option<Waker> {
        let entry = self.entry(key)?;
        entry.seen = seen;
        (seen == Seen::Closed).then(|| entry.waker.clone())
    }
}

static WATCHED: Mutex<Watched> = Mutex::new(Watched {
    slots: Vec::new(),
    free: Vec::new(),
    generation: 0,
});

fn watched() -> MutexGuard<'static, Watched> {
    WATCHED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts the [`watcher`] thread the first time a client is watched.
fn start_watcher() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("client-watch".into())
            .spawn(watcher);
        if let Err(e) = spawned {
            log::error!("cannot start the client watch thread: {e}");
        }
    });
}

/// Every [`PERIOD`], looks at each watched socket and wakes the forwards whose client is gone.
/// The sockets are looked at outside the lock: a forward that ends meanwhile removes its entry,
/// and what was seen of its socket is then dropped (the generation no longer matches), so a
/// socket number reused by a later connection is never taken for the old one.
fn watcher() {
    let mut sockets = Vec::new();
    let mut found = Vec::new();
    loop {
        std::thread::sleep(PERIOD);
        watched().to_look_at(&mut sockets);
        if sockets.is_empty() {
            continue;
        }
        found.clear();
        found.extend(
            sockets
                .iter()
                .map(|(key, fd)| (*key, look_at(fd)))
                .filter(|(_, seen)| *seen != Seen::Waiting),
        );
        if found.is_empty() {
            continue;
        }
        let wake: Vec<Waker> = {
            let mut list = watched();
            found
                .iter()
                .filter_map(|&(key, seen)| list.seen(key, seen))
                .collect()
        };
        wake.into_iter().for_each(Waker::wake);
    }
}

/// Looks at a watched socket.
fn look_at(socket: &Socket) -> Seen {
    match socket {
        Socket::Plain(fd) => look(*fd),
        Socket::Tls(digest) => tcp_state(digest),
    }
}

/// Linux's TCP states after the peer closed or reset the connection: `TCP_CLOSE_WAIT` (its
/// FIN arrived), `TCP_CLOSE` (reset), `TCP_LAST_ACK`.
const PEER_CLOSED_STATES: [u8; 3] = [8, 7, 9];

/// Whether the TCP connection under a TLS session was closed by the client.
fn tcp_state(digest: &SocketDigest) -> Seen {
    match digest.tcp_info() {
        Some(info) if !PEER_CLOSED_STATES.contains(&info.tcpi_state) => Seen::Waiting,
        _ => Seen::Closed,
    }
}

/// Peeks at one byte of the socket without waiting or consuming it.
fn look(fd: RawFd) -> Seen {
    use nix::errno::Errno;
    use nix::sys::socket::{recv, MsgFlags};
    let mut byte = [0u8; 1];
    match recv(fd, &mut byte, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT) {
        Ok(0) => Seen::Closed,
        Ok(_) => Seen::Bytes,
        Err(Errno::EAGAIN | Errno::EINTR) => Seen::Waiting,
        Err(_) => Seen::Closed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn a_peek_tells_waiting_bytes_and_closed_apart_without_consuming() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let fd = server.as_raw_fd();
        assert_eq!(look(fd), Seen::Waiting);
        client.write_all(b"GET").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while look(fd) != Seen::Bytes && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(look(fd), Seen::Bytes);
        assert_eq!(
            look(fd),
            Seen::Bytes,
            "a peek leaves the bytes in the socket"
        );
        let mut other = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server2, _) = listener.accept().unwrap();
        other.flush().unwrap();
        drop(other);
        while look(server2.as_raw_fd()) != Seen::Closed && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(look(server2.as_raw_fd()), Seen::Closed);
    }

    /// A waker that counts its wakes.
    struct Flag(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Flag {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn a_waiting_forward_is_woken_and_completes_when_its_client_closes() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let flag = std::sync::Arc::new(Flag(Default::default()));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let mut gone = ClientWatch {
            fd: Some(Socket::Plain(server.as_raw_fd())),
        }
        .gone();
        assert!(Pin::new(&mut gone).poll(&mut cx).is_pending());
        let key = gone.slot.expect("on the watched list after the first poll");
        std::thread::sleep(PERIOD * 2);
        assert_eq!(flag.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert!(Pin::new(&mut gone).poll(&mut cx).is_pending());
        drop(client);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while flag.0.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            assert!(std::time::Instant::now() < deadline, "never woken");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(Pin::new(&mut gone).poll(&mut cx).is_ready());
        assert!(watched().entry(key).is_none(), "off the list once done");
    }

    #[test]
    fn what_was_seen_of_a_removed_entry_is_dropped_even_when_its_slot_is_reused() {
        let mut list = Watched::default();
        let waker = Waker::noop();
        let old = list.insert(Socket::Plain(7), waker);
        list.remove(old);
        let new = list.insert(Socket::Plain(8), waker);
        assert_eq!(old.index, new.index, "the slot is reused");
        assert!(list.seen(old, Seen::Closed).is_none());
        assert!(
            !list.poll(new, waker),
            "the new entry is not taken for closed"
        );
        let mut sockets = Vec::new();
        list.to_look_at(&mut sockets);
        assert_eq!(sockets.len(), 1);
        assert!(matches!(sockets[0], (key, Socket::Plain(8)) if key == new));
        // Bytes end the looking; a close is reported to the entry's forward.
        assert!(list.seen(new, Seen::Bytes).is_none());
        list.to_look_at(&mut sockets);
        assert!(sockets.is_empty());
        let other = list.insert(Socket::Plain(9), waker);
        assert!(list.seen(other, Seen::Closed).is_some());
        assert!(list.poll(other, waker));
    }

    #[test]
    fn dropping_a_watch_takes_it_off_the_list() {
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut gone = ClientWatch {
            fd: Some(Socket::Plain(-1)),
        }
        .gone();
        assert!(Pin::new(&mut gone).poll(&mut cx).is_pending());
        let key = gone.slot.unwrap();
        drop(gone);
        assert!(watched().entry(key).is_none());
        let mut none = ClientWatch { fd: None }.gone();
        assert!(Pin::new(&mut none).poll(&mut cx).is_pending());
        assert!(none.slot.is_none(), "no socket, nothing watched");
    }
}
