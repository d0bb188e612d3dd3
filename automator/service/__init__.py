"""The service: its loop, the actuator and enforcer, scheduling and the web app."""
