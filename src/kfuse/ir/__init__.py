"""The intermediate representation, frozen: program, dependency graph, kernel vocabulary, plan."""
