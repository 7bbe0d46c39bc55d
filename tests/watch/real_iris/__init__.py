"""keeper's job watch against the real iris controller (marin-iris), not keeper's emulator.

`serve.py` (the controller) and `zephyr_job.py` (the job its workers run) are run by the
real-iris venv's python, .venv/iris (`make iris-venv`); `world.py` is keeper's side: it starts
the controller for a test module and watches jobs on it.
"""
