"""Complete the example wizard through `palm mcp` with the official MCP Python SDK.

Run by node/tests/mcp.rs:

    python tests/mcp/wizard.py PALM_BINARY DATA_DIR examples/wizard.yaml

An agent's way through examples/wizard.yaml with the palm_wizard tool: start, a wrong
answer refused, answers, back to an earlier step, a branch taken, a collection filled
item by item, the summary committed, a second commit refused. Every check that fails
raises; on success it prints one JSON report on stdout.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client


def check(condition, what, detail=None):
    if not condition:
        raise AssertionError(f"{what}: {detail!r}")


def text_of(result):
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")


async def drive(palm, data, example):
    report = {"steps": []}
    server = StdioServerParameters(
        command=palm,
        args=["--data", data, "mcp"],
        env={"PALM_LOG": "warn", "NO_COLOR": "1"},
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = {tool.name for tool in (await session.list_tools()).tools}
            check("palm_wizard" in tools, "palm_wizard listed", sorted(tools))

            async def call(arguments):
                result = await session.call_tool("palm_wizard", arguments)
                check(not result.is_error, f"palm_wizard {arguments}", text_of(result))
                value = result.structured_content
                if value.get("step"):
                    report["steps"].append(value["step"]["step"])
                return value

            started = await call({"action": "start", "flow": example})
            job = started["job"]
            report["job"] = job
            step = started["step"]
            check(step["step"] == "name" and step["n"] == 1 and step["of"] == 6, "first step", step)
            check(started["moves"]["properties"]["answer"]["type"] == "string", "moves", started["moves"])

            wrong = await session.call_tool("palm_wizard", {"action": "answer", "job": job, "answer": ""})
            check(wrong.is_error and "invalid_input" in text_of(wrong), "empty name refused", text_of(wrong))

            await call({"action": "answer", "job": job, "answer": "ledger"})
            now = await call({"action": "answer", "job": job, "answer": "rust"})
            check(now["step"]["step"] == "edition", "rust asks the edition", now)
            now = await call({"action": "back", "job": job})
            check(now["step"]["step"] == "language" and now["step"]["default"] == "rust",
                  "back to language", now)
            now = await call({"action": "answer", "job": job, "answer": "go"})
            check(now["step"]["step"] == "features", "go skips the edition", now)
            now = await call({"action": "answer", "job": job, "answer": ["tracing"]})
            check(now["step"]["kind"] == "collection", "endpoints", now)
            await call({"action": "answer", "job": job, "move": {"add": "/invoices"}})
            await call({"action": "answer", "job": job, "move": {"add": "/refunds"}})
            now = await call({"action": "answer", "job": job, "move": {"edit": {"index": 1, "item": "/credits"}}})
            check(now["step"]["items"] == ["/invoices", "/credits"], "items", now)
            now = await call({"action": "answer", "job": job, "move": {"done": True}})
            check(now["step"]["kind"] == "summary", "summary", now)
            check(now["answers"]["endpoints"] == ["/invoices", "/credits"], "answers", now)

            done = await call({"action": "commit", "job": job, "timeout": "60s"})
            check(done["status"] == "succeeded" and done["step"] is None, "committed", done)
            report["answers"] = done["answers"]
            again = await session.call_tool("palm_wizard", {"action": "commit", "job": job})
            check(again.is_error and "not_waiting" in text_of(again), "second commit refused",
                  text_of(again))
            status = await session.call_tool("palm_status", {"job": job})
            report["created"] = status.structured_content["state"]["created"]["stdout"]
    return report


def main():
    palm, data, example = sys.argv[1:4]
    report = asyncio.run(drive(palm, data, example))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
