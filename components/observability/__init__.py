"""What the platform measures and pages on. Read ``monitoring`` first: the component that installs the rules,
dashboards and GPU metrics. ``alert_settings`` holds the levels operators tune; ``alert_rules`` builds the rule
groups from them with ``protection_alerts`` and ``training_alerts``; ``dashboards`` the Grafana dashboards;
``gpu_metrics`` the DCGM exporter."""
