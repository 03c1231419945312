//! The control surface of a node: the protocol, the socket server and the client.
//!
//! Everything that drives jobs (CLI, MCP, scripts) sends a [`protocol::Request`]; a node
//! answers with [`dispatch`], whether the request came over `DIR/palm.sock` or from a
//! command running the node in-process.

pub use palm_api::{client, protocol};
pub mod server;

use crate::genome::Genome;
use crate::genome::kernel::KernelMsg;
use crate::genome::places::PlacesMsg;
use protocol::{ErrorBody, Request, Response};
use std::sync::Arc;
use std::time::Duration;

pub use palm_api::protocol::WAIT_MS_MAX;

/// Answers one request: at the job's home (over the tree's links when that is another
/// node), else through this node's organs.
pub async fn dispatch(genome: &Arc<Genome>, request: Request) -> Response {
    if let Some(tree) = crate::link::tree_of(genome)
        && let Some(answer) = tree.hop.route(&request).await
    {
        return answer;
    }
    dispatch_here(genome, request).await
}

/// Answers a request at this node, which is its home (or which it is not about a job).
pub async fn dispatch_here(genome: &Arc<Genome>, request: Request) -> Response {
    if let Request::Tree = request {
        return Response::ok(match crate::link::tree_of(genome) {
            Some(tree) => tree.hop.view().await,
            None => serde_json::json!({
                "node": genome.info.name,
                "role": genome.info.profile,
                "parent": null,
                "projection": {"of": null, "valid": true, "home_unreachable_since": null},
                "tree": {"name": genome.info.name, "role": genome.info.profile, "self": true,
                         "seats": genome.settings.seats, "children": []},
            }),
        });
    }
    if request.is_places() {
        let Some(places) = genome.places.actor() else {
            return Response::err(ErrorBody::failure(
                "unavailable",
                "the node's place book is restarting; try again",
            ));
        };
        return match places
            .call(
                |reply| PlacesMsg::Call(Box::new(request), reply),
                Some(Duration::from_secs(30)),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(response)) => response,
            _ => Response::err(ErrorBody::failure(
                "unavailable",
                "the node's place book did not answer",
            )),
        };
    }
    if matches!(
        request,
        Request::TokenCreate { .. } | Request::TokenRevoke { .. }
    ) {
        return crate::tokens::answer(genome, request).await;
    }
    let Some(kernel) = genome.kernel() else {
        return Response::err(
            ErrorBody::failure("unavailable", "the node's kernel is restarting; try again")
                .hint("`palm vitality` shows the node's state"),
        );
    };
    let (timeout, job_for_status) = match &request {
        Request::Wait { job, timeout_ms } => (
            Duration::from_millis(timeout_ms.unwrap_or(WAIT_MS_MAX).min(WAIT_MS_MAX)),
            Some(job.clone()),
        ),
        _ => (Duration::from_secs(120), None),
    };
    match kernel
        .call(|reply| KernelMsg::Call(request, reply), Some(timeout))
        .await
    {
        Ok(ractor::rpc::CallResult::Success(response)) => response,
        Ok(ractor::rpc::CallResult::Timeout) => match job_for_status {
            // A wait that timed out answers with the job as it is now.
            Some(job) => Box::pin(dispatch(genome, Request::Status { job })).await,
            None => Response::err(ErrorBody::failure(
                "timeout",
                "the node did not answer in time",
            )),
        },
        Ok(ractor::rpc::CallResult::SenderError) | Err(_) => Response::err(ErrorBody::failure(
            "unavailable",
            "the node's kernel stopped before answering (a failed commit restarts it); try again",
        )),
    }
}
