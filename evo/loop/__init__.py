"""evo.loop: the run loop and its start-up: the controller, when and where evaluations run
(scheduler, pacing), feedback, seeding, tasks arriving while others are prepared, what the loop
commits with every change, late torch.compile baselines and stored seeds."""
