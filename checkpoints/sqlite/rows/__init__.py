"""Row codecs of ``SqliteCheckpointer``: each table's checksums, and decoding a row with
checks (``checks`` says what is checked; one module per group of tables)."""
