"""The prebuild worker: compile each matrix entry in a subprocess, then publish what it wrote."""
