"""Entry point for mitmdump/mitmweb:

    mitmdump -s addons/chaos.py --set chaos_plan=plans/llm-429.yaml --set chaos_events=events.jsonl
"""

from mitmchaos.addons import build_addons
from mitmchaos.addons.suite import Suite

addons = [Suite(build_addons())]
