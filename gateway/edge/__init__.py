"""Was the request refused before any work, and why: body reading, limits, admission, exposure and
auth, remote files, unexpected errors."""
