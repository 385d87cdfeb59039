"""Timer (delay) messages: scheduled in a system topic, put in their real topic when due."""
