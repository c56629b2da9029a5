"""An emulated fleet and what it runs against: a private mosquitto, the fault
proxy, the fleet of emulated boards, and the demo that ties them together."""
