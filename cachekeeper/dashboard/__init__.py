"""The read-only coverage dashboard (`cachekeeper dashboard`): a Starlette app served by uvicorn.

It has no write action and no login: it binds 127.0.0.1 unless told otherwise, and docs/cli.md shows how
to put an authenticating proxy in front. Every number on it is aggregated and paginated in SQL
(`catalog/views.py`). Starlette, uvicorn and Jinja2 come with the `dashboard` extra.
"""
