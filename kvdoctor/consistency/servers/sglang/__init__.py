"""SGLang's room of the consistency check: its Deployment (``deployment.py``), the only code here that imports
SGLang's engine room. Kept empty so a module of the room imports without the rest (httpx, the client)."""
