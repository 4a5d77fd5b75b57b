"""The leaves every part shares: errors and their exit codes, the console, the project's
paths, TOML reading, digests, the command runner (with its supervisor and the test-only
fault points) and atomic script writing. Nothing here imports another folder of cuforge."""
