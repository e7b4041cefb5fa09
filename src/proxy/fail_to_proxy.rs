//! What the client gets when proxying fails: a JSON 502/503/504 for provider failures, a 500
//! for anything else.

use super::ctx::RequestCtx;
use crate::api::{classify, describe, respond, ApiError};
use crate::providers::CredentialError;
use pingora_core::{Error, ErrorSource};
use pingora_proxy::{FailToProxy, Session};

/// Answers a failed request (if nothing was sent yet) and returns the status for logging.
pub async fn respond(session: &mut Session, e: &Error, ctx: &mut RequestCtx) -> FailToProxy {
    let provider = ctx
        .route
        .as_ref()
        .map(|r| r.candidate.provider.name.clone())
        .unwrap_or_default();
    let credential = e.root_cause().downcast_ref::<CredentialError>();
    let err = match (credential, classify(e)) {
        (Some(why), _) => ApiError::credential_unavailable(&provider, why),
        (None, Some(kind)) => ApiError::upstream(&provider, kind, &describe(e)),
        _ if e.esource() == &ErrorSource::Downstream => {
            return FailToProxy {
                error_code: 0,
                can_reuse_downstream: false,
            }
        }
        _ => ApiError::internal(),
    };
    let already_answered = session.response_written().is_some();
    if !already_answered {
        session.set_keepalive(None);
        let request_id = ctx.ensure_request_id().to_owned();
        if respond::send_error(session, &request_id, &err, &[])
            .await
            .is_err()
        {
            log::debug!("could not write the error answer; the client is gone");
        }
    }
    FailToProxy {
        error_code: if already_answered { 0 } else { err.status },
        can_reuse_downstream: false,
    }
}
