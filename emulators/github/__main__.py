"""python -m emulators.github --port 8472 --token-file .dev/github-token"""

from __future__ import annotations

from emulators.github.server import DEFAULT_PORT, DEFAULT_TOKEN, serve
from emulators.lifecycle import command_line, parse


def main(argv: list[str] | None = None) -> None:
    parser = command_line(
        "python -m emulators.github",
        "Local GitHub self-hosted runner API emulator (0 as port picks a free one).",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--token", default=DEFAULT_TOKEN, help="the Bearer token it accepts")
    parser.add_argument(
        "--token-file", help="read the token from this file instead (keeps it out of `ps`)"
    )
    args = parse(parser, argv)
    token = args["token"]
    if args["token_file"]:
        with open(args["token_file"], encoding="utf-8") as fh:
            token = fh.read().strip()
    serve(args["host"], args["port"], token)


if __name__ == "__main__":
    main()
