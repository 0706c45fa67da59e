"""The dpsql service (``dpsql serve``): the data owner's process that holds data, metadata,
ledgers and credentials, and answers untrusted analysts over the PostgreSQL wire protocol,
an HTTP JSON API and a web page. See docs/server.md.

``config`` reads server.yaml, ``auth`` holds credentials (SCRAM-SHA-256 verifiers) and
failed-login limits, ``service`` answers requests (the only module that opens engine
connections), ``pgwire`` and ``http`` are the two front ends, ``cli`` starts them.
"""
