"""``python -m mesh.demo`` (``make demo``): a narrated tour of the SDK, the daemon and rooms."""
