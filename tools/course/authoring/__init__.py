"""Authoring a chapter: the template rules every notebook follows (`check`) and `new-chapter` (`scaffold`)."""
