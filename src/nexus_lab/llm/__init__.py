"""The LLM planner (`nexus agent --planner llm`) and the fake model it is tested against (`nexus fake-llm`)."""
