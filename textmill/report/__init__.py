"""What a run did, for people: one-line summaries of every command (`lines`), the table of the last runs'
results side by side (`results`), and report.html (`page`, from `templates/report.html`), its charts (`charts`)
and what the run's record keeps for it (`samples`)."""
