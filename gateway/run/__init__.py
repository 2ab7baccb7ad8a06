"""Where CPU work goes off the event loop: the supervised worker pool, offloading and its gate."""
