//! Noticing that the client of a forward has left, whichever protocol it speaks: over HTTP/1 its
//! connection closing ([`ClientWatch`]), over HTTP/2 its stream reset (`RST_STREAM`) or its
//! whole connection closed.
//!
//! An HTTP/2 client's streams share one connection, so its socket says nothing about one
//! stream: the stream's own state does. Pingora's h2 session offers it
//! (`watch_h2_stream_close`, the h2 crate's `poll_reset`): ready when the client resets the
//! stream, and with an error when the connection under it is gone. It borrows the session, so
//! it is raced only where the forward waits on the provider and leaves the session alone.

use super::client_watch::{client_left, ClientWatch, Gone};
use pingora_core::protocols::http::ServerSession;
use pingora_core::Result;
use std::future::Future;

/// The watch on one forward's client, raced against each wait on the provider.
#[derive(Debug)]
pub struct Departure {
    /// The client's socket over HTTP/1 (pending for good when there is none, as over HTTP/2).
    socket: Gone,
}

impl Departure {
    /// Watches the client of `downstream`.
    pub fn new(downstream: &ServerSession) -> Self {
        Departure {
            socket: ClientWatch::new(downstream).gone(),
        }
    }

    /// `work`'s output, unless the client leaves first: then `work` is dropped (and with it
    /// whatever provider connection it holds) and the answer is [`client_left`]. When both are
    /// ready at once, `work` wins.
    pub async fn race<F: Future>(
        &mut self,
        downstream: &mut ServerSession,
        work: F,
    ) -> Result<F::Output> {
        let socket = &mut self.socket;
        match downstream.watch_h2_stream_close() {
            Some(stream_closed) => tokio::select! {
                biased;
                done = work => Ok(done),
                // A reset (with its reason) or an error of the stream or its connection: either
                // way nobody is left to read the answer.
                _ = stream_closed => Err(client_left()),
            },
            None => tokio::select! {
                biased;
                done = work => Ok(done),
                () = socket => Err(client_left()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use pingora_core::protocols::http::v2::server::{self as h2_server, H2Accept};
    use pingora_core::protocols::l4::stream::Stream;
    use pingora_core::protocols::Digest;
    use pingora_core::{ErrorSource, ErrorType};
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::net::{TcpListener, TcpStream};
    use tokio::task::JoinHandle;
    use tokio::time::timeout;

    /// Two streams of one HTTP/2 connection on loopback: the client's request streams (to
    /// reset), the client's connection task (aborting it drops the connection), and the two
    /// server sessions, in the order the requests were sent.
    async fn two_h2_streams() -> (
        Vec<h2::SendStream<Bytes>>,
        JoinHandle<()>,
        ServerSession,
        ServerSession,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let (client, server) = tokio::join!(
            h2::client::handshake(tcp),
            h2_server::handshake(Box::new(Stream::from(accepted)), None)
        );
        let (mut requests, connection) = client.unwrap();
        let client_connection = tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut streams = Vec::new();
        for _ in 0..2 {
            let request = http::Request::get("http://127.0.0.1/").body(()).unwrap();
            let (_answer, stream) = requests.send_request(request, true).unwrap();
            streams.push(stream);
        }
        let mut server = server.unwrap();
        let digest = Arc::new(Digest::default());
        let mut sessions = Vec::new();
        while sessions.len() < 2 {
            match h2_server::HttpSession::from_h2_conn(&mut server, digest.clone()).await {
                Ok(Some(H2Accept::Session(s))) => sessions.push(ServerSession::new_http2(s)),
                other => panic!("no stream: {:?}", other.err()),
            }
        }
        // The server side of the connection goes on being driven, as Pingora's accept loop does.
        tokio::spawn(async move {
            while let Ok(Some(_)) =
                h2_server::HttpSession::from_h2_conn(&mut server, digest.clone()).await
            {
            }
        });
        let second = sessions.pop().unwrap();
        let first = sessions.pop().unwrap();
        (streams, client_connection, first, second)
    }

    fn is_client_left(e: &pingora_core::Error) -> bool {
        e.esource() == &ErrorSource::Downstream && e.etype() == &ErrorType::ConnectionClosed
    }

    #[tokio::test]
    async fn a_reset_stream_ends_its_wait_and_not_its_neighbours() {
        let (mut streams, _connection, mut reset, mut neighbour) = two_h2_streams().await;
        let mut reset_watch = Departure::new(&reset);
        let mut neighbour_watch = Departure::new(&neighbour);
        streams[0].send_reset(h2::Reason::CANCEL);
        let waited = timeout(
            Duration::from_secs(5),
            reset_watch.race(&mut reset, std::future::pending::<()>()),
        )
        .await
        .expect("the reset is noticed");
        assert!(is_client_left(&waited.unwrap_err()));
        assert_eq!(
            reset_watch
                .race(&mut reset, std::future::ready(3))
                .await
                .unwrap(),
            3,
            "work that is ready wins"
        );
        let slept = neighbour_watch
            .race(
                &mut neighbour,
                tokio::time::sleep(Duration::from_millis(300)),
            )
            .await;
        assert!(slept.is_ok(), "the other stream waits on");
    }

    #[tokio::test]
    async fn a_dropped_connection_ends_the_wait_of_every_stream_on_it() {
        let (_streams, connection, mut first, mut second) = two_h2_streams().await;
        let mut watches = [Departure::new(&first), Departure::new(&second)];
        connection.abort();
        for (watch, session) in watches.iter_mut().zip([&mut first, &mut second]) {
            let waited = timeout(
                Duration::from_secs(5),
                watch.race(session, std::future::pending::<()>()),
            )
            .await
            .expect("the closed connection is noticed");
            assert!(is_client_left(&waited.unwrap_err()));
        }
    }
}
