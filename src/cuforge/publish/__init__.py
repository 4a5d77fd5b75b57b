"""Publishing: the wheelhouse and its manifest, the pins written into each wheel's metadata
(and read back), the import guard a torch-linking wheel carries, the simple index, a team's
wheels (``--wheels``) and pinned downloads."""
