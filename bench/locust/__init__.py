"""Load from many machines with Locust: a locustfile driving the chat scenario, `bench locust`
to run it (headless or master/workers), and ingestion of its records into bench reports/gates."""
