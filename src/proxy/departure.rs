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
use pingora_core::Result;
use pingora_proxy::Session;
use std::future::Future;

/// The watch on one forward's client, raced against each wait on the provider.
#[derive(Debug)]
pub struct Departure {
    /// The client's socket over HTTP/1 (pending for good when there is none, as over HTTP/2).
    socket: Gone,
}

impl Departure {
    /// Watches the client of `session`.
    pub fn new(session: &Session) -> Self {
        Departure {
            socket: ClientWatch::new(session).gone(),
        }
    }

    /// `work`'s output, unless the client leaves first: then `work` is dropped (and with it
    /// whatever provider connection it holds) and the answer is [`client_left`]. When both are
    /// ready at once, `work` wins.
    pub async fn race<F: Future>(&mut self, session: &mut Session, work: F) -> Result<F::Output> {
        let socket = &mut self.socket;
        match session.as_downstream_mut().watch_h2_stream_close() {
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
