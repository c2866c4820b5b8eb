"""lavinmqperf: load generator and benchmark tool, LavinMQ's command line."""
