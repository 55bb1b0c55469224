"""mitmchaos: chaos-test AI agents at the traffic level."""

__version__ = "0.1.0"
