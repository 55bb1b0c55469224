"""mitmchaos benchmarks: what the proxy, the runner and scoring cost an agent (``make bench``)."""
