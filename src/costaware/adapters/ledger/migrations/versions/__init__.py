"""One module per revision, oldest first; ``down_revision`` chains them."""
