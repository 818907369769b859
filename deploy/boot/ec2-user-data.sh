#!/bin/bash
# EC2 user data for an AMI with cachekeeper installed: one line that hydrates before the server starts
# (best effort within 120 s) and leaves the server's env in /etc/profile.d. Prefer cloud-init.yaml (systemd
# ordering, miss reports at shutdown and every minute) where the server runs as a unit.
cachekeeper hydrate --config /etc/cachekeeper/prebuild.yaml --dest /var/cache/cachekeeper/inductor --store s3://my-compile-cache/cachekeeper --deadline 120 --best-effort --print-env > /etc/profile.d/cachekeeper.sh
