//! sturnus's own answers in OpenAI's shape: the error vocabulary ([`ApiError`], with the
//! mapping from Pingora errors) and the functions that write an answer to the client. The
//! request path, the admin endpoints and the metrics listener all answer through here, so none
//! of them depends on another for it.

pub mod error;
pub mod respond;

pub use error::{classify, describe, ApiError};
