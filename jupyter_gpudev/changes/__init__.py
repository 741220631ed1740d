"""Changes: what a user changed inside a dev container, written back out as a Dockerfile.

``capture`` takes a container's change set (through the engine's archive API only) against its
baseline, ``packages``/``probe`` read package state as data, ``classify``/``compare`` decide what
is a change, ``model`` holds the change set, ``dockerfile`` renders it, ``commit`` verifies,
snapshots and pushes, ``tracker`` tells the container lifecycle what removing a container would
lose. Import the modules themselves: this package imports nothing on its own."""
