"""The scripted Responses-API model (tests and `marathon demo`): server, image, scenarios."""
