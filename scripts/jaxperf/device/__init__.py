"""The one door from the analyses to the device folders: what each device answers."""
