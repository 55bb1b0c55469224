"""A small streamable-HTTP MCP server (the official SDK's MCPServer) for the MCP fault tests.

python -m tests.mcp_server PORT [--json]
"""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("inventory")


@server.tool()
def lookup(sku: str) -> dict:
    """Stock level and price of one product."""
    return {
        "sku": sku,
        "name": "widget",
        "stock": 42,
        "price": 9.5,
        "tags": ["blue", "small"],
        "supplier": {"name": "Acme", "country": "NL"},
    }


@server.tool()
def read_file(path: str) -> str:
    """The text of a file in the project."""
    return f"# README for {path}\nRun `make test` to check the build.\n"


@server.tool()
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]), json_response="--json" in sys.argv)
