-- retrieval_config gained "fusion" (zscore, the new default, or rrf). Knowledge bases made
-- before it keep ranking as they did: their stored settings say rrf.
UPDATE kb.knowledge_base
   SET retrieval_config = retrieval_config || '{"fusion": "rrf"}'
 WHERE NOT retrieval_config ? 'fusion';
