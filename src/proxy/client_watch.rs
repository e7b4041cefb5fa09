//! Noticing a client that leaves while the provider works: sturnus's stand-in for what Pingora's
//! proxy loop does with `read_body_or_idle` while it waits for the upstream.
//!
//! sturnus forwards from `request_filter` (see `forward.rs`), so nothing reads the client's
//! socket between sending the request upstream and relaying the answer. [`ClientWatch::gone`]
//! looks at the socket every [`PERIOD`] while a wait lasts, with a peek that consumes nothing
//! (`MSG_PEEK`): end of stream or an error means the client closed (or reset) its connection;
//! bytes mean it pipelined its next request. Those stay in the socket for the header guard to
//! read once this answer is complete, and the watch ends there, since a close behind them
//! cannot be seen.
//!
//! Why not `read_body_or_idle` itself: it reads the client's next byte out of the socket. With
//! Pingora's pipelining off it then fails the request ("Sent data after end of body"); with it
//! on, the byte is kept inside Pingora for its own parser, out of reach of the header guard
//! (`header_guard.rs`), which reads every request header itself. A request answered within
//! [`PERIOD`] costs one timer and no system call.

use pingora_core::protocols::l4::stream::Stream as SocketStream;
use pingora_core::{Error, ErrorType};
use pingora_proxy::Session;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;
use tokio::time::Instant;

/// How often the client's socket is looked at while the provider works (a departed client is
/// noticed within this time).
pub const PERIOD: Duration = Duration::from_millis(200);

/// The client's socket, watched for a close while the provider works.
#[derive(Debug, Clone, Copy)]
pub struct ClientWatch {
    /// The client's socket; `None` when the downstream is not a plain socket (nothing watched).
    fd: Option<RawFd>,
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
    /// Watches the client of `session`. The socket stays open as long as the session lives, and
    /// the watch is only awaited while the session is borrowed by the forward.
    pub fn new(session: &Session) -> Self {
        let fd = session
            .as_downstream()
            .stream()
            .and_then(|s| s.as_any().downcast_ref::<SocketStream>())
            .map(AsRawFd::as_raw_fd);
        ClientWatch { fd }
    }

    /// Completes when the client has closed its connection; pending while it waits (and for
    /// good once it has sent more bytes, or when there is no socket to watch).
    pub async fn gone(self) {
        let Some(fd) = self.fd else {
            return std::future::pending().await;
        };
        let mut next = Instant::now() + PERIOD;
        loop {
            tokio::time::sleep_until(next).await;
            match look(fd) {
                Seen::Waiting => next += PERIOD,
                Seen::Bytes => return std::future::pending().await,
                Seen::Closed => return,
            }
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
}
