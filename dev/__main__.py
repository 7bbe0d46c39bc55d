"""`python -m dev ...` is `keeper-dev ...`."""

from dev.main import main

main()
