"""Local stand-in for GitHub's self-hosted runner REST endpoints, with fault injection.

    from emulators.github import GitHubEmulator

    emu = GitHubEmulator(token="t")
    url = await emu.start()  # http://127.0.0.1:PORT
    runner_id = emu.add_runner("repo:acme/api", "runner-1")

See docs/github-emulator.md.
"""

from emulators.github.server import DEFAULT_PORT, DEFAULT_TOKEN, GitHubEmulator, serve
from emulators.github.state import Fault

__all__ = ["DEFAULT_PORT", "DEFAULT_TOKEN", "Fault", "GitHubEmulator", "serve"]
