"""The local development stack behind `keeper-dev`: Temporal, the TPU emulator, a worker.

`layout` says which processes make up the stack for a given settings file, `procs` starts
and stops them as detached process groups tracked by pid files, `probes` checks their
health, and `stack` ties the three together for `up`, `down` and `status`.
"""
