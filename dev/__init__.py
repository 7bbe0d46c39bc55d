"""keeper's development tooling, `keeper-dev`: the local stack, the emulators' control commands
and the demos. It lives in the checkout beside emulators/ and tests/, never in the wheel;
it may import keeper, and keeper never imports it (pyproject.toml's import contracts)."""
