"""The placement lab: a model's scorecard at init (`measure`), the theory checks and the
stability rule (`checks`), and the rule's ranking against a sweep's measured outcomes (`rank`)."""
