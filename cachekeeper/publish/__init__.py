"""The build side's write path: snapshot built cache roots into blobs (`snapshot`), then publish blobs,
manifest and catalog row in that order (`upload`)."""
