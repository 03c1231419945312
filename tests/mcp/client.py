"""Drive `palm mcp` with the official MCP Python SDK (the `mcp` package, 2.x).

Run by node/tests/mcp.rs with the interpreter `.ci/run` installs into target/py-venv:

    python tests/mcp/client.py PALM_BINARY DATA_DIR examples/approval.yaml

It walks the acceptance path — initialize, list tools and resources, read the card,
submit the approval example without waiting, find it waiting with palm_jobs, check that
the CLI sees the same job while the session runs, continue it and see it succeed — and
the error paths (a malformed call, input the wait refuses, an unknown tool), progress
notifications of a waiting submit, and cancellation of an in-flight call. Every check
that fails raises; on success it prints one JSON report on stdout.
"""

import asyncio
import json
import subprocess
import sys

from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client

SLEEPY_FLOW = """
name: sleepy
tree:
  sequence:
    - sleep: 2500ms
    - succeed
"""

LONG_FLOW = """
name: long
tree:
  sleep: 60s
"""


def check(condition, what, detail=None):
    if not condition:
        raise AssertionError(f"{what}: {detail!r}")


def text_of(result):
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")


async def drive(palm, data, example):
    report = {}
    server = StdioServerParameters(
        command=palm,
        args=["--data", data, "mcp", "--seats", "2"],
        env={"PALM_LOG": "warn", "NO_COLOR": "1"},
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            report["protocol"] = init.protocol_version
            check(init.server_info.name == "palm", "server name", init.server_info)

            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            expected = {
                "palm_assist", "palm_flows", "palm_submit", "palm_status", "palm_jobs",
                "palm_continue", "palm_cancel", "palm_inspect", "palm_places",
                "palm_tree", "palm_vitality",
            }
            check(expected <= set(tools), "tools listed", sorted(tools))
            for tool in tools.values():
                check(tool.input_schema.get("type") == "object", "input schema", tool.name)
                check(tool.output_schema is not None, "output schema", tool.name)
            report["tools"] = sorted(tools)

            resources = [str(r.uri) for r in (await session.list_resources()).resources]
            check("palm://agent/card" in resources and "palm://agent/guide" in resources,
                  "resources", resources)
            templates = [t.uri_template for t in (await session.list_resource_templates()).resource_templates]
            check(set(templates) == {"palm://flows/{name}", "palm://jobs/{id}"}, "templates", templates)
            card = (await session.read_resource("palm://agent/card")).contents[0].text
            check("palm_assist" in card and "wait" in card, "card", card[:200])
            report["card_bytes"] = len(card)
            prompts = [p.name for p in (await session.list_prompts()).prompts]
            report["prompts"] = prompts
            await session.send_ping()

            # Submit the approval example without waiting; it builds, then parks.
            submitted = await session.call_tool("palm_submit", {"flow": example, "wait": False})
            check(not submitted.is_error, "submit", text_of(submitted))
            job = submitted.structured_content["job"]
            report["job"] = job

            waiting = []
            for _ in range(200):
                listed = await session.call_tool("palm_jobs", {"status": "waiting"})
                check(not listed.is_error, "palm_jobs", text_of(listed))
                waiting = [j for j in listed.structured_content["jobs"] if j["job"] == job]
                if waiting:
                    break
                await asyncio.sleep(0.05)
            check(waiting, "job listed as waiting", job)
            check(waiting[0]["waiting"] == ["approve"], "waits on approve", waiting[0])

            # The CLI sees the same job while the session runs.
            cli = subprocess.run([palm, "--data", data, "status", job, "--json"],
                                 capture_output=True, text=True, timeout=60)
            check(cli.returncode == 0, "palm status exit", cli.stderr)
            cli_view = json.loads(cli.stdout)
            check(cli_view["job"] == job and cli_view["status"] == "waiting", "cli view", cli_view)
            report["cli_status"] = cli_view["status"]

            # The card's first tool points at the continue, with the key and an input.
            assist = await session.call_tool("palm_assist", {"goal": "approve the waiting build"})
            check(not assist.is_error, "assist", text_of(assist))
            suggestion = assist.structured_content
            check(suggestion["tool"] == "palm_continue", "assist tool", suggestion)
            check(suggestion["arguments"] == {"job": job, "key": "approve", "input": {"ok": True}},
                  "assist arguments", suggestion)

            # Malformed calls get tool errors that name the field; the session goes on.
            missing = await session.call_tool("palm_continue", {"job": job})
            check(missing.is_error and "`key`" in text_of(missing), "missing key", text_of(missing))
            wrong_type = await session.call_tool("palm_status", {"job": 42})
            check(wrong_type.is_error and "argument `job`" in text_of(wrong_type), "wrong type",
                  text_of(wrong_type))
            refused = await session.call_tool("palm_continue",
                                              {"job": job, "key": "approve", "input": {"ok": "yes"}})
            check(refused.is_error and "invalid_input" in text_of(refused), "refused input",
                  text_of(refused))
            try:
                await session.call_tool("palm_explode", {})
                check(False, "unknown tool accepted")
            except MCPError as err:
                report["unknown_tool_code"] = err.error.code
            await session.send_ping()
            report["errors_then_ping"] = True

            # Continue it and see it succeed.
            continued = await session.call_tool(
                "palm_continue",
                {"job": job, "key": "approve", "input": {"ok": True}, "wait": True, "timeout": "60s"},
            )
            check(not continued.is_error, "continue", text_of(continued))
            check(continued.structured_content["status"] == "succeeded", "succeeded",
                  continued.structured_content)
            status = await session.call_tool("palm_status", {"job": job})
            report["final_status"] = status.structured_content["status"]
            job_resource = (await session.read_resource(f"palm://jobs/{job}")).contents[0].text
            check(json.loads(job_resource)["status"] == "succeeded", "job resource", job_resource[:200])

            # Progress notifications while a submit waits.
            progress = []

            async def on_progress(value, total, message):
                progress.append((value, message))

            slept = await session.call_tool(
                "palm_submit", {"source": SLEEPY_FLOW, "wait": True, "timeout": "60s"},
                progress_callback=on_progress,
            )
            check(not slept.is_error, "sleepy submit", text_of(slept))
            check(slept.structured_content["status"] == "succeeded", "sleepy", slept.structured_content)
            check(len(progress) >= 2, "progress notifications", progress)
            report["progress_notifications"] = len(progress)

            # Cancellation: a call the client abandons is cancelled; the session goes on
            # and the job keeps running.
            try:
                await session.call_tool(
                    "palm_submit", {"source": LONG_FLOW, "wait": True, "timeout": "60s"},
                    read_timeout_seconds=1.0,
                )
                check(False, "the long call returned")
            except MCPError as err:
                report["abandoned_code"] = err.error.code
            await session.send_ping()
            running = await session.call_tool("palm_jobs", {"status": "running"})
            long_jobs = [j for j in running.structured_content["jobs"] if j["flow"] == "long"]
            check(long_jobs, "the abandoned call's job goes on", running.structured_content)
            cancelled = await session.call_tool("palm_cancel", {"job": long_jobs[0]["job"],
                                                                "reason": "test over"})
            check(cancelled.structured_content["status"] == "cancelled", "cancel", text_of(cancelled))
            report["cancelled"] = True
    return report


def main():
    palm, data, example = sys.argv[1:4]
    report = asyncio.run(drive(palm, data, example))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
