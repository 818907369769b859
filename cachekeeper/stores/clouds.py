"""What pyproject's `cachekeeper.stores` entry points name for the cloud stores: stand-ins that parse
`s3://` and `gs://` URLs without their SDK, which is imported (with stores/s3.py or stores/gcs.py) only
when a store is opened."""

from __future__ import annotations

from .base import LazyStore

S3 = LazyStore("cachekeeper.stores.s3:S3Store")
GS = LazyStore("cachekeeper.stores.gcs:GCSStore")
