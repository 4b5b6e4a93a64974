"""The webhook sender: `toolq webhooks`, a process of its own that sends the deliveries the job
scripts record (store/deliveries.py), so a slow receiver never slows a worker or the gateway."""
