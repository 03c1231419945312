//! The rmcp [`ServerHandler`] of `palm mcp`: tools, resources, prompts.
//!
//! Written by hand rather than with rmcp's macros: the tool table in `tools.rs` already
//! carries each schema as data (checked by the same validator flows use), and a plain
//! `match` keeps what each MCP method does visible in one place. Protocol versions are
//! rmcp's: `initialize` agrees on the version the client asks for when it is one rmcp
//! knows (2024-11-05 through 2025-11-25), and 2026-07-28 clients, which skip the
//! handshake, are served statelessly through `server/discover` and per-request `_meta`.

use super::control_link::ControlLink;
use super::tools::{self, CallContext, ToolError};
use super::{resources, stdio};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CustomRequest, CustomResult, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    Prompt, PromptArgument, PromptMessage, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Role, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;
use std::sync::Arc;

/// What `initialize` tells the client before it reads anything.
const INSTRUCTIONS: &str = "Palm runs durable jobs (Behavior Trees that wait, resume and \
survive crashes). Call palm_assist with your goal first, or read palm://agent/card. A job \
with status waiting needs input: palm_status shows waiting_on (key, prompt, schema); \
deliver it with palm_continue. The CLI (`palm status JOB`) sees the same jobs.";

/// The prompt offered by `prompts/list`.
const PROMPT: &str = "palm_goal";

/// See the module docs.
#[derive(Clone)]
pub struct PalmMcp {
    link: Arc<ControlLink>,
}

impl PalmMcp {
    /// A handler sending its requests through `link`.
    pub fn new(link: Arc<ControlLink>) -> PalmMcp {
        PalmMcp { link }
    }

    async fn run_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(spec) = tools::spec(&request.name) else {
            let known: Vec<&str> = tools::specs().iter().map(|s| s.name).collect();
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool `{}`; tools: {}",
                    request.name,
                    known.join(", ")
                ),
                None,
            ));
        };
        let arguments = match spec.check(request.arguments.as_ref()) {
            Ok(arguments) => arguments,
            Err(err) => return Ok(err.into_result().into()),
        };
        let ctx = CallContext {
            cancel: context.ct.clone(),
            progress: context
                .meta
                .get_progress_token()
                .map(|token| (context.peer.clone(), token)),
        };
        tracing::debug!(target: "palm::mcp", tool = spec.name, "call");
        let result = tokio::select! {
            result = tools::call(&self.link, spec, arguments, &ctx) => result,
            // rmcp drops the answer of a cancelled request anyway; stop the work too.
            () = context.ct.cancelled() => Err(ToolError::new("cancelled", "the request was cancelled")),
        };
        Ok(match result {
            Ok(answer) => answer.into_result(),
            Err(err) => err.into_result(),
        }
        .into())
    }
}

impl ServerHandler for PalmMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
        .with_server_info(Implementation::new("palm", env!("CARGO_PKG_VERSION")).with_title("Palm"))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            tools::specs().iter().map(tools::ToolSpec::tool).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.run_tool(request, context).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(
            resources::list(&self.link).await,
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let contents = resources::read(&self.link, &request.uri).await?;
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let prompt = Prompt::new(
            PROMPT,
            Some("Drive Palm toward a goal: read the card, ask palm_assist, act, check the job."),
            Some(vec![
                PromptArgument::new("goal")
                    .with_description("What to get done with Palm, in words.")
                    .with_required(true),
            ]),
        );
        Ok(ListPromptsResult::with_all_items(vec![prompt]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name != PROMPT {
            return Err(ErrorData::invalid_params(
                format!("unknown prompt `{}`; prompts: {PROMPT}", request.name),
                None,
            ));
        }
        let goal = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("goal"))
            .and_then(|g| g.as_str())
            .filter(|g| !g.trim().is_empty())
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    "prompt palm_goal: argument `goal` (what to get done, in words) is required",
                    Some(json!({"argument": "goal"})),
                )
            })?;
        let text = format!(
            "Use Palm to: {goal}\n\nFirst read the resource palm://agent/card. Then call \
             palm_assist with this goal and follow its suggestion. If a job ends up \
             waiting, palm_status shows what it waits on (key, prompt, schema); ask me \
             before you continue a wait whose prompt needs a human decision. Report the \
             job id and its final status."
        );
        Ok(
            GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
                .with_description("Drive Palm toward a goal")
                .into(),
        )
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        // The stdio reader replaces a line over the bound by this request, so the refusal
        // reaches the client correlated with its id (see stdio.rs).
        if request.method == stdio::OVERSIZED_METHOD {
            let bytes = request
                .params
                .as_ref()
                .and_then(|p| p.get("bytes"))
                .and_then(|b| b.as_u64())
                .unwrap_or_default();
            return Err(ErrorData::invalid_request(
                format!(
                    "request refused: {bytes} bytes is more than the bound of {} bytes per message (REQUEST_BYTES_MAX); send less per call (a large flow can be submitted by file path: palm_submit with flow set to the path)",
                    palm_api::protocol::REQUEST_BYTES_MAX
                ),
                Some(json!({"bytes": bytes, "bytes_max": palm_api::protocol::REQUEST_BYTES_MAX})),
            ));
        }
        Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("unknown method `{}`", request.method),
            None,
        ))
    }
}
