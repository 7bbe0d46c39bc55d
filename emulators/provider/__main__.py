"""`python -m emulators.provider`: a GARM provider when GARM calls it, else the admin CLI.

GARM runs a provider with GARM_COMMAND set and never with arguments, so arguments always
mean the admin CLI, even in a shell that happens to export GARM_COMMAND.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    if len(sys.argv) == 1 and os.environ.get("GARM_COMMAND"):
        from emulators.provider.garm import main as provider_main

        return provider_main()
    from emulators.provider.cli import main as admin_main

    return admin_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
